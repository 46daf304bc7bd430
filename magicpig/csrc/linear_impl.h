// Kernel 4 body: the decode linear layer for one block of output rows (linear_block, at the end).
// Included by isa_scalar.cpp / isa_avx2.cpp / isa_avx512.cpp after attend_impl.h (whose vector
// primitives it uses), inside their own namespace, with exactly one of MP_AVX512 / MP_AVX2 defined (or
// none for scalar).
//
// y[m, o] = bias[o] + sum_i x[m, i] W[o, i] for the rows o0 .. o0 + on - 1 (on <= kLinearRows) of W and
// every one of the M input rows. The block's weight rows are read from memory once, for the first input
// row, and from L1 for the others (a decode step has one to a few input rows, so reading W is all the
// memory traffic there is). Several output rows at once give independent FMA chains.

#if defined(MP_AVX512)
static inline __m512 load_w16(const void* w, int64_t i, bool bf16) {
  return bf16 ? load16_bf16(static_cast<const uint16_t*>(w) + i)
              : _mm512_loadu_ps(static_cast<const float*>(w) + i);
}
#elif defined(MP_AVX2)
static inline __m256 load_w8(const void* w, int64_t i, bool bf16) {
  return bf16 ? load8_bf16(static_cast<const uint16_t*>(w) + i)
              : _mm256_loadu_ps(static_cast<const float*>(w) + i);
}
#endif

static inline float weight_at(const void* w, int64_t i, bool bf16) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(w)[i]) : static_cast<const float*>(w)[i];
}

// y[m, o0 .. o0 + R) for one input row m (R fixed, so the accumulators stay in registers).
template <int R>
static inline void dot_rows(const LinearArgs& a, const char* W, int64_t o0, int64_t m) {
  const int64_t I = a.I, stride = I * (a.w_bf16 ? 2 : 4);
  const float* x = a.x + m * I;
  float sums[R];
  int64_t i = 0;
#if defined(MP_AVX512)
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (; i + 16 <= I; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(load_w16(W + r * stride, i, a.w_bf16), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) sums[r] = _mm512_reduce_add_ps(acc[r]);
#elif defined(MP_AVX2)
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (; i + 8 <= I; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(load_w8(W + r * stride, i, a.w_bf16), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) sums[r] = hsum8(acc[r]);
#else
  for (int r = 0; r < R; ++r) sums[r] = 0.f;
#endif
  for (int r = 0; r < R; ++r) {
    const void* w = W + r * stride;
    float s = sums[r];
    for (int64_t j = i; j < I; ++j) s += weight_at(w, j, a.w_bf16) * x[j];
    a.y[m * a.O + o0 + r] = s + (a.bias ? a.bias[o0 + r] : 0.f);
  }
}

void linear_block(const LinearArgs& a, int64_t o0, int64_t on) {
  const int64_t stride = a.I * (a.w_bf16 ? 2 : 4);
  const char* W = static_cast<const char*>(a.W) + o0 * stride;
  for (int64_t m = 0; m < a.M; ++m) {
    if (on == kLinearRows) {
      dot_rows<kLinearRows>(a, W, o0, m);
    } else {
      for (int64_t r = 0; r < on; ++r) dot_rows<1>(a, W + r * stride, o0 + r, m);
    }
  }
}
