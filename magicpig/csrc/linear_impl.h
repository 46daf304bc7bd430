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

static inline void store_row(const LinearArgs& a, const float* sums, int MR, int64_t o, int64_t m0) {
  const float b = a.bias ? a.bias[o] : 0.f;
  for (int m = 0; m < MR; ++m) {
    float& out = a.y[(m0 + m) * a.ldy + o];
    out = a.accumulate ? out + (sums[m] + b) : sums[m] + b;
  }
}

// y[m0 .. m0 + MR, o] for one weight row w (row o of W) and MR input rows. The weight row is read front
// to back once (memory order, which the hardware prefetcher follows best: reading several weight rows
// side by side measured 20-25% slower here); 4 / MR partial sums per input row keep four FMA chains in
// flight.
template <int MR>
static inline void dot_row(const LinearArgs& a, const void* w, int64_t o, int64_t m0) {
  const int64_t I = a.I;
  const bool bf16 = a.w_format == kWeightBF16;
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
      const vec wv = vload_row(w, i + u * kW, bf16);
      for (int m = 0; m < MR; ++m) acc[m][u] = vfmadd(wv, vload(x + m * I + i + u * kW), acc[m][u]);
    }
  }
  for (; i + kW <= I; i += kW) {
    const vec wv = vload_row(w, i, bf16);
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
  for (int m = 0; m < MR; ++m)
    for (int64_t j = i; j < I; ++j) sums[m] += weight_at(w, j, bf16) * x[m * I + j];
  store_row(a, sums, MR, o, m0);
}

#if defined(MP_VEC)
// The 32 products of one block of int8 weights w and int8 inputs x, summed in 8 int32 lanes as float32:
// |w| (unsigned) times x with w's sign (maddubs: pairs into int16, at most 2 * 127 * 127 < 2^15), then pairs
// of those into int32 (AVX2 instructions, in the AVX-512 variant too).
static inline __m256 q8_block_sums(const int8_t* w, const int8_t* x) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#endif

// dot_row for a kWeightQ8 row against the quantized inputs (a.xq, a.xd): per block the exact integer sum
// of q_w q_x, times d_w d_x into the row's sum. Blocks go in pairs with an accumulator each, so that the
// two FMA chains overlap. The weights are prefetched kQ8Prefetch bytes ahead, one line per pair of blocks:
// the integer work per byte is several times the float paths', and without it fewer lines are in flight
// than the memory needs to stream (measured: about half the bandwidth of the bfloat16 path).
constexpr int64_t kQ8Prefetch = 1536;
template <int MR>
static inline void dot_row_q8(const LinearArgs& a, const int8_t* q, int64_t o, int64_t m0) {
  const int64_t I = a.I, blocks = I / kQ8Block;
  const float* scale = reinterpret_cast<const float*>(q + I);
  float sums[MR];
  for (int m = 0; m < MR; ++m) {
    const int8_t* xq = a.xq + (m0 + m) * I;
    const float* xd = a.xd + (m0 + m) * blocks;
#if defined(MP_VEC)
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t blk = 0;
    for (; blk + 2 <= blocks; blk += 2) {
      const int64_t i0 = blk * kQ8Block;
      if (m == 0) _mm_prefetch(reinterpret_cast<const char*>(q + i0) + kQ8Prefetch, _MM_HINT_T0);
      acc0 = _mm256_fmadd_ps(q8_block_sums(q + i0, xq + i0), _mm256_set1_ps(scale[blk] * xd[blk]), acc0);
      acc1 = _mm256_fmadd_ps(q8_block_sums(q + i0 + kQ8Block, xq + i0 + kQ8Block),
                             _mm256_set1_ps(scale[blk + 1] * xd[blk + 1]), acc1);
    }
    if (blk < blocks)
      acc0 = _mm256_fmadd_ps(q8_block_sums(q + blk * kQ8Block, xq + blk * kQ8Block),
                             _mm256_set1_ps(scale[blk] * xd[blk]), acc0);
    sums[m] = hsum256(_mm256_add_ps(acc0, acc1));
#else
    float s = 0.f;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      int32_t dot = 0;
      for (int64_t i = blk * kQ8Block; i < (blk + 1) * kQ8Block; ++i) dot += int32_t{q[i]} * int32_t{xq[i]};
      s += static_cast<float>(dot) * (scale[blk] * xd[blk]);
    }
    sums[m] = s;
#endif
  }
  store_row(a, sums, MR, o, m0);
}

// All input rows against weight row w (row o), in groups of 4, 2 and 1: the row is read from memory for
// the first group and stays in L1 for the later ones.
template <typename Row, void (*Dot1)(const LinearArgs&, const Row*, int64_t, int64_t),
          void (*Dot2)(const LinearArgs&, const Row*, int64_t, int64_t),
          void (*Dot4)(const LinearArgs&, const Row*, int64_t, int64_t)>
static inline void all_rows(const LinearArgs& a, const Row* w, int64_t o) {
  int64_t m = 0;
  for (; m + 4 <= a.M; m += 4) Dot4(a, w, o, m);
  if (a.M - m >= 2) {
    Dot2(a, w, o, m);
    m += 2;
  }
  if (m < a.M) Dot1(a, w, o, m);
}

void linear_block(const LinearArgs& a, int64_t o0, int64_t on) {
  const int64_t stride = weight_row_bytes(a.w_format, a.I);
  const char* W = static_cast<const char*>(a.W);
  for (int64_t o = o0; o < o0 + on; ++o) {
    if (a.w_format == kWeightQ8)
      all_rows<int8_t, dot_row_q8<1>, dot_row_q8<2>, dot_row_q8<4>>(a, reinterpret_cast<const int8_t*>(W + o * stride), o);
    else
      all_rows<void, dot_row<1>, dot_row<2>, dot_row<4>>(a, W + o * stride, o);
  }
}
