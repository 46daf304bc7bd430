// Kernel 4 body: the decode linear layer for one block of output rows (linear_block, at the end).
// Included by linear_scalar.cpp / linear_avx2.cpp / linear_avx512.cpp inside their own namespace after
// a `#pragma GCC target`, with exactly one of MP_AVX512 / MP_AVX2 defined (or none for scalar).
//
// y[m, o] = bias[o] + sum_i x[m, i] W[o, i] for the rows o0 .. o0 + on - 1 (on <= kLinearRows) of W and
// every one of the M input rows. The block's weight rows are read from memory once, for the first input
// row, and from L1 for the others (a decode step has one to a few input rows, so reading W is all the
// memory traffic there is). Several output rows at once give independent FMA chains.

static inline float bf16_value(uint16_t x) {
  uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

#if defined(MP_AVX512)
static inline __m512 load_w16(const void* w, int64_t i, bool bf16) {
  if (!bf16) return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i))),
      16));
}
#elif defined(MP_AVX2)
static inline __m256 load_w8(const void* w, int64_t i, bool bf16) {
  if (!bf16) return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i))),
      16));
}
static inline float hsum8_linear(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

static inline float weight_at(const void* w, int64_t i, bool bf16) {
  return bf16 ? bf16_value(static_cast<const uint16_t*>(w)[i]) : static_cast<const float*>(w)[i];
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
  for (int r = 0; r < R; ++r) sums[r] = hsum8_linear(acc[r]);
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
