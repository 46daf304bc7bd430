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

// Kernel 4's input quantization (magicpig_cpu.h: the Q8_0 rule per block of kQ8Block = 32 floats, ties to
// even, 0 where the scale is 0), the same bits in every variant: the block maximum of |x| (a NaN never
// enters it), x / d clamped to [-127, 127] (a NaN becomes 127, as std::min / std::max leave it), rounded by
// adding and subtracting 1.5 * 2^23 (the nearest integer, ties to even, for |v| < 2^22). It runs on the
// calling thread before the parallel rows, so a vector loop here is time the other threads do not wait.
constexpr float kQ8Round = 12582912.f;

void quantize_q8(const float* x, int64_t M, int64_t I, int8_t* q, float* d) {
  const int64_t blocks = I / kQ8Block;
  for (int64_t r = 0; r < M * blocks; ++r) {
    const float* xb = x + r * kQ8Block;
    int8_t* qb = q + r * kQ8Block;
#if defined(MP_AVX512)
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16), zero = _mm512_setzero_ps();
    // max(v, acc) keeps acc where v is NaN (the second operand wins an unordered compare)
    const __m512 a = _mm512_max_ps(_mm512_abs_ps(x1), _mm512_max_ps(_mm512_abs_ps(x0), zero));
    const float scale = _mm512_reduce_max_ps(a) / 127.f;
    d[r] = scale;
    if (!(scale > 0.f)) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_setzero_si256());
      continue;
    }
    const __m512 ds = _mm512_set1_ps(scale), hi = _mm512_set1_ps(127.f), lo = _mm512_set1_ps(-127.f),
                 rnd = _mm512_set1_ps(kQ8Round);
    for (int k = 0; k < 2; ++k) {
      __m512 v = _mm512_div_ps(k ? x1 : x0, ds);
      v = _mm512_max_ps(_mm512_min_ps(v, hi), lo);  // min(v, 127): 127 where v is NaN
      v = _mm512_sub_ps(_mm512_add_ps(v, rnd), rnd);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16 * k), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
    }
#elif defined(MP_AVX2)
    const __m256 sign = _mm256_set1_ps(-0.f), zero = _mm256_setzero_ps();
    __m256 xv[4], a = zero;
    for (int k = 0; k < 4; ++k) {
      xv[k] = _mm256_loadu_ps(xb + 8 * k);
      a = _mm256_max_ps(_mm256_andnot_ps(sign, xv[k]), a);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float scale = _mm_cvtss_f32(m4) / 127.f;
    d[r] = scale;
    if (!(scale > 0.f)) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_setzero_si256());
      continue;
    }
    const __m256 ds = _mm256_set1_ps(scale), hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f),
                 rnd = _mm256_set1_ps(kQ8Round);
    __m256i iv[4];
    for (int k = 0; k < 4; ++k) {
      __m256 v = _mm256_max_ps(_mm256_min_ps(_mm256_div_ps(xv[k], ds), hi), lo);
      iv[k] = _mm256_cvtps_epi32(_mm256_sub_ps(_mm256_add_ps(v, rnd), rnd));
    }
    // the packs work per 128-bit lane: bytes come out as dwords x0[0:4] x1[0:4] x2[0:4] x3[0:4] x0[4:8] ...
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb),
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
#else
    float amax = 0.f;
    for (int64_t i = 0; i < kQ8Block; ++i) {
      const float v = __builtin_fabsf(xb[i]);
      amax = amax < v ? v : amax;
    }
    const float scale = amax / 127.f;
    d[r] = scale;
    for (int64_t i = 0; i < kQ8Block; ++i) {
      float v = 0.f;
      if (scale > 0.f) {
        v = xb[i] / scale;
        v = v < 127.f ? v : 127.f;
        v = -127.f < v ? v : -127.f;
      }
      qb[i] = static_cast<int8_t>((v + kQ8Round) - kQ8Round);
    }
#endif
  }
}

// Kernel 6's SiLU-and-multiply, act[i] = silu(g[i]) * u[i] for n floats: silu(g) = g * sigmoid(g), the sigmoid
// from t = exp(-|g|) <= 1 (g >= 0: 1 / (1 + t), g < 0: t / (1 + t)), so that the vector exp above (exp_inplace,
// for arguments <= 0) never overflows. Relative error within a few 1e-7 of the libm formula.
void silu_mul(const float* g, const float* u, float* act, int64_t n) {
  float t[256];
  for (int64_t i0 = 0; i0 < n; i0 += 256) {
    const int64_t m = n - i0 < 256 ? n - i0 : 256;
    for (int64_t i = 0; i < m; ++i) t[i] = -__builtin_fabsf(g[i0 + i]);
    exp_inplace(t, m);
    for (int64_t i = 0; i < m; ++i) {
      const float x = g[i0 + i], e = t[i];
      act[i0 + i] = x * ((x >= 0.f ? 1.f : e) / (1.f + e)) * u[i0 + i];
    }
  }
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
