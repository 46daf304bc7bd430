// Kernel 4 body: the decode linear layer for one block of output rows (linear_block, at the end).
// Included by isa_scalar.cpp / isa_avx2.cpp / isa_avx512.cpp after attend_impl.h (whose vector
// primitives it uses), inside their own namespace, with exactly one of MP_AVX512 / MP_AVX2 defined (or
// none for scalar).
//
// y[m, o] = bias[o] + sum_i x[m, i] W[o, i] for the rows o0 .. o0 + on - 1 (on <= kLinearRows) of W and
// every one of the M input rows. Each weight row is read from memory once, for the first group of input
// rows, and from L1 for the others (a decode step has one to a few input rows, so reading W is all the
// memory traffic there is).

static inline float weight_at(const void* w, int64_t i, bool bf16) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(w)[i]) : static_cast<const float*>(w)[i];
}

// y[m0 .. m0 + MR, o] for one weight row w (row o of W) and MR input rows. The weight row is read front
// to back once (memory order, which the hardware prefetcher follows best: reading several weight rows
// side by side measured 20-25% slower here); 4 / MR partial sums per input row keep four FMA chains in
// flight.
template <int MR>
static inline void dot_row(const LinearArgs& a, const void* w, int64_t o, int64_t m0) {
  const int64_t I = a.I;
  const float* x = a.x + m0 * I;
  float sums[MR];
  int64_t i = 0;
#if defined(MP_VEC)
  constexpr int U = MR >= 4 ? 1 : 4 / MR;  // partial sums per input row
  vec acc[MR][U];
  for (int m = 0; m < MR; ++m)
    for (int u = 0; u < U; ++u) acc[m][u] = vzero();
  for (; i + U * kW <= I; i += U * kW) {
    for (int u = 0; u < U; ++u) {
      const vec wv = vload_row(w, i + u * kW, a.w_bf16);
      for (int m = 0; m < MR; ++m) acc[m][u] = vfmadd(wv, vload(x + m * I + i + u * kW), acc[m][u]);
    }
  }
  for (; i + kW <= I; i += kW) {
    const vec wv = vload_row(w, i, a.w_bf16);
    for (int m = 0; m < MR; ++m) acc[m][0] = vfmadd(wv, vload(x + m * I + i), acc[m][0]);
  }
  for (int m = 0; m < MR; ++m) {
    vec t = acc[m][0];
    for (int u = 1; u < U; ++u) t = vadd(t, acc[m][u]);
    sums[m] = vsum(t);
  }
#else
  for (int m = 0; m < MR; ++m) sums[m] = 0.f;
#endif
  const float b = a.bias ? a.bias[o] : 0.f;
  for (int m = 0; m < MR; ++m) {
    float s = sums[m];
    for (int64_t j = i; j < I; ++j) s += weight_at(w, j, a.w_bf16) * x[m * I + j];
    float& out = a.y[(m0 + m) * a.ldy + o];
    out = a.accumulate ? out + (s + b) : s + b;
  }
}

void linear_block(const LinearArgs& a, int64_t o0, int64_t on) {
  const int64_t stride = a.I * (a.w_bf16 ? 2 : 4);
  const char* W = static_cast<const char*>(a.W);
  for (int64_t o = o0; o < o0 + on; ++o) {
    const void* w = W + o * stride;
    int64_t m = 0;
    for (; m + 4 <= a.M; m += 4) dot_row<4>(a, w, o, m);  // the row stays in L1 for the later groups
    if (a.M - m >= 2) {
      dot_row<2>(a, w, o, m);
      m += 2;
    }
    if (m < a.M) dot_row<1>(a, w, o, m);
  }
}
