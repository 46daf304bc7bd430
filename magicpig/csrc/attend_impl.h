// Kernel 3 body: importance-weighted sparse attention for one kv-head group over a list of retrieved
// tokens (attend_group), and kernel 5's body (exact_range, at the end). Included by isa_scalar.cpp /
// isa_avx2.cpp / isa_avx512.cpp inside their own namespace after a `#pragma GCC target`, with exactly
// one of MP_AVX512 / MP_AVX2 defined (or none for the scalar variant). Uses no library templates, only
// the vector primitives below (linear_impl.h, included after it, uses them too).
//
// Each token's key row is read once and dotted with every query head of the group that sampled it
// (logit scale*q.k - ln(u + 1e-4), u from the clamped cosine); its value row is read once and
// accumulated into each of those heads.

static inline float bf16_to_f32(uint16_t x) {
  uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
static inline float to_f32(uint16_t x) { return bf16_to_f32(x); }
static inline float to_f32(float x) { return x; }

// The vector primitives: one vector of kW floats (AVX-512: 16, AVX2: 8) and the operations on it that the
// kernels use; vload of a bf16 row widens kW values to float32. The scalar variant has none (MP_VEC unset)
// and runs the scalar loops only.
#if defined(MP_AVX512) || defined(MP_AVX2)
static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif
#if defined(MP_AVX512)
#define MP_VEC 1
using vec = __m512;
constexpr int64_t kW = 16;
static inline vec vzero() { return _mm512_setzero_ps(); }
static inline vec vset1(float x) { return _mm512_set1_ps(x); }
static inline vec vload(const float* p) { return _mm512_loadu_ps(p); }
static inline vec vload(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
static inline void vstore(float* p, vec v) { _mm512_storeu_ps(p, v); }
static inline vec vfmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline float vsum(vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(MP_AVX2)
#define MP_VEC 1
using vec = __m256;
constexpr int64_t kW = 8;
static inline vec vzero() { return _mm256_setzero_ps(); }
static inline vec vset1(float x) { return _mm256_set1_ps(x); }
static inline vec vload(const float* p) { return _mm256_loadu_ps(p); }
static inline vec vload(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
static inline void vstore(float* p, vec v) { _mm256_storeu_ps(p, v); }
static inline vec vfmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline vec vadd(vec a, vec b) { return _mm256_add_ps(a, b); }
static inline float vsum(vec v) { return hsum256(v); }
#endif

#if defined(MP_VEC)
// Elements i .. i + kW of a float32 (bf16 false) or bf16 row, as float32.
static inline vec vload_row(const void* row, int64_t i, bool bf16) {
  return bf16 ? vload(static_cast<const uint16_t*>(row) + i) : vload(static_cast<const float*>(row) + i);
}
#endif

// q . k for a float32 query and a key row of T = float (float32) or uint16_t (bf16): 32 elements per
// step, in 2 sums of 16 (AVX-512) or 4 of 8 (AVX2).
template <typename T>
static inline float dot_row(const float* q, const T* k, int64_t d) {
  int64_t i = 0;
  float acc = 0.f;
#if defined(MP_VEC)
  vec s0 = vzero(), s1 = vzero(), s2 = vzero(), s3 = vzero();
  for (; i + 32 <= d; i += 32) {
    s0 = vfmadd(vload(q + i), vload(k + i), s0);
    s1 = vfmadd(vload(q + i + kW), vload(k + i + kW), s1);
    if constexpr (kW == 8) {
      s2 = vfmadd(vload(q + i + 16), vload(k + i + 16), s2);
      s3 = vfmadd(vload(q + i + 24), vload(k + i + 24), s3);
    }
  }
  for (; i + kW <= d; i += kW) s0 = vfmadd(vload(q + i), vload(k + i), s0);
  acc = kW == 8 ? vsum(vadd(vadd(s0, s1), vadd(s2, s3))) : vsum(vadd(s0, s1));
#endif
  for (; i < d; ++i) acc += q[i] * to_f32(k[i]);
  return acc;
}

static inline float dot_row(const float* q, const void* row, bool bf16, int64_t d) {
  return bf16 ? dot_row(q, static_cast<const uint16_t*>(row), d) : dot_row(q, static_cast<const float*>(row), d);
}

// acc += sum_j w[j] * row_j over m float32 / bf16 value rows: a slice of the accumulator stays in
// registers while all m rows are added to it (one load and store of acc per slice, not per row).
static inline void accumulate_rows(float* acc, const float* w, const char* const* rows, int64_t m, bool bf16,
                                   int64_t d) {
  int64_t i = 0;
#if defined(MP_VEC)
  for (; i + 4 * kW <= d; i += 4 * kW) {
    vec a0 = vload(acc + i), a1 = vload(acc + i + kW), a2 = vload(acc + i + 2 * kW), a3 = vload(acc + i + 3 * kW);
    for (int64_t j = 0; j < m; ++j) {
      const vec vw = vset1(w[j]);
      if (bf16) {
        const uint16_t* v = reinterpret_cast<const uint16_t*>(rows[j]) + i;
        a0 = vfmadd(vw, vload(v), a0);
        a1 = vfmadd(vw, vload(v + kW), a1);
        a2 = vfmadd(vw, vload(v + 2 * kW), a2);
        a3 = vfmadd(vw, vload(v + 3 * kW), a3);
      } else {
        const float* v = reinterpret_cast<const float*>(rows[j]) + i;
        a0 = vfmadd(vw, vload(v), a0);
        a1 = vfmadd(vw, vload(v + kW), a1);
        a2 = vfmadd(vw, vload(v + 2 * kW), a2);
        a3 = vfmadd(vw, vload(v + 3 * kW), a3);
      }
    }
    vstore(acc + i, a0);
    vstore(acc + i + kW, a1);
    vstore(acc + i + 2 * kW, a2);
    vstore(acc + i + 3 * kW, a3);
  }
  for (; i + kW <= d; i += kW) {
    vec a0 = vload(acc + i);
    for (int64_t j = 0; j < m; ++j) a0 = vfmadd(vset1(w[j]), vload_row(rows[j], i, bf16), a0);
    vstore(acc + i, a0);
  }
#endif
  for (; i < d; ++i) {
    float s = acc[i];
    for (int64_t j = 0; j < m; ++j)
      s += w[j] * (bf16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(rows[j])[i])
                        : reinterpret_cast<const float*>(rows[j])[i]);
    acc[i] = s;
  }
}

static inline void prefetch_row(const char* row, int64_t row_bytes) {
  for (int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(row + off, 0, 1);
}

static inline float correction(float cos, const AttendArgs& a) {
  cos = cos < -1.f ? -1.f : (cos > 1.f ? 1.f : cos);
  if (cos >= -a.table_limit && cos <= a.table_limit) {
    float x = (cos + 1.f) * (0.5f * static_cast<float>(a.table_n));
    int64_t i = static_cast<int64_t>(x);
    if (i >= a.table_n) i = a.table_n - 1;
    float frac = x - static_cast<float>(i);
    return a.table[i] + frac * (a.table[i + 1] - a.table[i]);
  }
  return exact_correction(cos, a.K, a.L, a.min_collisions);
}

// exp of n floats in place (x <= 0 here: logit minus its head's maximum).
static inline void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
#if defined(MP_AVX2) || defined(MP_AVX512)
  // 2^k * p(r), x = k ln2 + r, |r| <= ln2 / 2, degree-6 polynomial (relative error ~2e-7)
  const __m256 log2e = _mm256_set1_ps(1.44269504f), ln2_hi = _mm256_set1_ps(0.693359375f),
               ln2_lo = _mm256_set1_ps(-2.12194440e-4f), lo = _mm256_set1_ps(-87.0f);
  const __m256 c1 = _mm256_set1_ps(1.0f), c2 = _mm256_set1_ps(0.5f), c3 = _mm256_set1_ps(1.66666667e-1f),
               c4 = _mm256_set1_ps(4.16666667e-2f), c5 = _mm256_set1_ps(8.33333333e-3f),
               c6 = _mm256_set1_ps(1.38888889e-3f);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_max_ps(_mm256_loadu_ps(x + i), lo);
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(v, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_fnmadd_ps(k, ln2_hi, v);
    v = _mm256_fnmadd_ps(k, ln2_lo, v);
    __m256 p = _mm256_fmadd_ps(c6, v, c5);
    p = _mm256_fmadd_ps(p, v, c4);
    p = _mm256_fmadd_ps(p, v, c3);
    p = _mm256_fmadd_ps(p, v, c2);
    p = _mm256_fmadd_ps(p, v, c1);
    p = _mm256_fmadd_ps(p, v, c1);
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    _mm256_storeu_ps(x + i, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
#endif
  for (; i < n; ++i) x[i] = __builtin_expf(x[i]);
}

// q.k and |k|^2 in one read of a key row of T = float / uint16_t (bf16) (the first head of a token needs
// both): 16 elements per step, in 1 pair of sums (AVX-512) or 2 (AVX2).
template <typename T>
static inline float dot_row_sumsq(const float* q, const T* k, int64_t d, float* sumsq) {
  int64_t i = 0;
  float acc = 0.f, ss = 0.f;
#if defined(MP_VEC)
  vec s0 = vzero(), s1 = vzero(), n0 = vzero(), n1 = vzero();
  for (; i + 16 <= d; i += 16) {
    const vec x0 = vload(k + i);
    s0 = vfmadd(vload(q + i), x0, s0);
    n0 = vfmadd(x0, x0, n0);
    if constexpr (kW == 8) {
      const vec x1 = vload(k + i + 8);
      s1 = vfmadd(vload(q + i + 8), x1, s1);
      n1 = vfmadd(x1, x1, n1);
    }
  }
  acc = vsum(kW == 8 ? vadd(s0, s1) : s0);
  ss = vsum(kW == 8 ? vadd(n0, n1) : n0);
#endif
  for (; i < d; ++i) {
    const float x = to_f32(k[i]);
    acc += q[i] * x;
    ss += x * x;
  }
  *sumsq = ss;
  return acc;
}

static inline float dot_row_sumsq(const float* q, const void* row, bool bf16, int64_t d, float* sumsq) {
  return bf16 ? dot_row_sumsq(q, static_cast<const uint16_t*>(row), d, sumsq)
              : dot_row_sumsq(q, static_cast<const float*>(row), d, sumsq);
}

// Kernel 3's token list of one work item (magicpig_cpu.h, ListTokensFn). AVX-512 with G <= 32: per 16 bits of
// a word, the set positions and their heads' bits are compressed into place, without the branch per token of
// the loop at the end (which mispredicts where each word's bits run out).
int64_t list_tokens(const uint64_t* bits, int64_t G, int64_t W, int64_t w0, int64_t w1, uint32_t* ids,
                    uint64_t* masks) {
  int64_t n = 0;
#if defined(MP_AVX512)
  if (G <= 32) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    uint64_t word[32];
    for (int64_t w = w0; w < w1; ++w) {
      uint64_t any = 0;
      for (int64_t g = 0; g < G; ++g) any |= word[g] = bits[g * W + w];
      for (int c = 0; c < 4 && (any >> (16 * c)) != 0; ++c) {
        const __mmask16 sel = static_cast<__mmask16>(any >> (16 * c));
        __m512i heads = _mm512_setzero_si512();
        for (int64_t g = 0; g < G; ++g)
          heads = _mm512_mask_or_epi32(heads, static_cast<__mmask16>(word[g] >> (16 * c)), heads,
                                       _mm512_set1_epi32(static_cast<int>(1u << g)));
        const __m512i id = _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(w * 64 + 16 * c)));
        _mm512_storeu_si512(ids + n, _mm512_maskz_compress_epi32(sel, id));
        heads = _mm512_maskz_compress_epi32(sel, heads);
        _mm512_storeu_si512(masks + n, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(heads)));
        _mm512_storeu_si512(masks + n + 8, _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(heads, 1)));
        n += __builtin_popcount(sel);
      }
    }
    return n;
  }
#endif
  for (int64_t w = w0; w < w1; ++w) {
    uint64_t any = 0;
    for (int64_t g = 0; g < G; ++g) any |= bits[g * W + w];
    while (any) {
      const int t = __builtin_ctzll(any);
      any &= any - 1;
      uint64_t mask = 0;
      for (int64_t g = 0; g < G; ++g) mask |= ((bits[g * W + w] >> t) & 1u) << g;
      ids[n] = static_cast<uint32_t>(w * 64 + t);
      masks[n++] = mask;
    }
  }
  return n;
}

// The U tokens (ids sorted, masks = heads of the group that sampled each token) are read once, in
// blocks of kBlock tokens, with an online softmax per head across blocks. Within a block:
//   1. keys: q.k of every (token, head) pair, its head, 1 / |k| of its token (|k| from the same read)
//   2. logits scale * q.k - ln(u(cos) + 1e-4) and the block's maximum per head
//   3. a head whose maximum grew rescales its accumulator; weights exp(logit - max), sums per head
//   4. values: acc[head] += w * v, head by head with the accumulator in registers (the block's value
//      rows are still in cache)
// Each step is a loop of short independent iterations (the long dependent chain of one logit would
// otherwise serialise the pairs), and rows are prefetched a.prefetch tokens ahead, across blocks, so
// the loads of the next blocks are in flight while a block is computed.
constexpr int64_t kBlock = 16;

void attend_group(const AttendArgs& a, int64_t b, int64_t kvh, const uint32_t* ids, const uint64_t* masks,
                  int64_t U, float* part) {
  const int64_t d = a.d, G = a.H / a.Hkv;
  const int64_t elt = a.bf16 ? 2 : 4, row_bytes = d * elt, token_bytes = 2 * row_bytes;
  const int64_t base = (b * a.Hkv + kvh) * a.n_max;  // first token of this (sequence, kv-head)
  const char* KV = static_cast<const char*>(a.kv) + base * token_bytes;
  const float* q0 = a.q + (b * a.H + kvh * G) * d;
  const int64_t ahead = a.prefetch;

  float inv_qn[64], block_max[64];
  float w[kBlock * 64], hw[kBlock * 64], inv_kn[kBlock];
  const char* rows[kBlock * 64];
  uint8_t head[kBlock * 64], token[kBlock * 64];
  int64_t start[65], fill[64];
  for (int64_t g = 0; g < G; ++g) {
    float* p = part + g * (d + 2);  // [running max, sum, acc...]
    p[0] = -__builtin_inff();
    p[1] = 0.f;
    for (int64_t i = 0; i < d; ++i) p[2 + i] = 0.f;
    float s = 0.f;
    for (int64_t i = 0; i < d; ++i) s += q0[g * d + i] * q0[g * d + i];
    s = __builtin_sqrtf(s);
    inv_qn[g] = 1.f / (s > 1e-12f ? s : 1e-12f);
  }
  for (int64_t u = 0; u < U && u < ahead; ++u) prefetch_row(KV + ids[u] * token_bytes, token_bytes);
  for (int64_t u0 = 0; u0 < U; u0 += kBlock) {
    const int64_t nb = U - u0 < kBlock ? U - u0 : kBlock;
    // 1. keys
    int64_t np = 0;
    for (int64_t t = 0; t < nb; ++t) {
      const int64_t u = u0 + t;
      if (u + ahead < U) prefetch_row(KV + ids[u + ahead] * token_bytes, token_bytes);
      const char* krow = KV + static_cast<int64_t>(ids[u]) * token_bytes;
      uint64_t mask = masks[u];
      int64_t g = __builtin_ctzll(mask);
      float ss;
      w[np] = dot_row_sumsq(q0 + g * d, krow, a.bf16, d, &ss);
      head[np] = static_cast<uint8_t>(g);
      token[np++] = static_cast<uint8_t>(t);
      for (mask &= mask - 1; mask; mask &= mask - 1) {
        g = __builtin_ctzll(mask);
        w[np] = dot_row(q0 + g * d, krow, a.bf16, d);
        head[np] = static_cast<uint8_t>(g);
        token[np++] = static_cast<uint8_t>(t);
      }
      const float kn = __builtin_sqrtf(ss);
      inv_kn[t] = 1.f / (kn > 1e-12f ? kn : 1e-12f);
    }
    // 2. logits
    for (int64_t g = 0; g < G; ++g) block_max[g] = -__builtin_inff();
    for (int64_t p = 0; p < np; ++p) {
      const int64_t g = head[p];
      const float logit = a.scale * w[p] + correction(w[p] * inv_qn[g] * inv_kn[token[p]], a);
      w[p] = logit;
      block_max[g] = logit > block_max[g] ? logit : block_max[g];
    }
    // 3. rescale and weights
    for (int64_t g = 0; g < G; ++g) {
      float* acc = part + g * (d + 2);
      if (block_max[g] > acc[0]) {
        if (acc[1] > 0.f) {
          const float c = __builtin_expf(acc[0] - block_max[g]);
          acc[1] *= c;
          for (int64_t i = 0; i < d; ++i) acc[2 + i] *= c;
        }
        acc[0] = block_max[g];
      }
    }
    for (int64_t p = 0; p < np; ++p) w[p] -= part[head[p] * (d + 2)];
    exp_inplace(w, np);
    // 4. values, head by head (pairs gathered per head: counting sort by head)
    for (int64_t g = 0; g <= G; ++g) start[g] = 0;
    for (int64_t p = 0; p < np; ++p) ++start[head[p] + 1];
    for (int64_t g = 0; g < G; ++g) start[g + 1] += start[g];
    for (int64_t g = 0; g < G; ++g) fill[g] = start[g];
    for (int64_t p = 0; p < np; ++p) {
      const int64_t slot = fill[head[p]]++;
      hw[slot] = w[p];
      rows[slot] = KV + static_cast<int64_t>(ids[u0 + token[p]]) * token_bytes + row_bytes;
    }
    for (int64_t g = 0; g < G; ++g) {
      const int64_t m = start[g + 1] - start[g];
      if (m == 0) continue;
      float* acc = part + g * (d + 2);
      for (int64_t j = start[g]; j < start[g + 1]; ++j) acc[1] += hw[j];
      accumulate_rows(acc + 2, hw + start[g], rows + start[g], m, a.bf16, d);
    }
  }
}

// Maximum and sum of the n <= 16 weights of a block (one masked vector on AVX-512; independent partial
// sums elsewhere, not one chain of dependent scalar additions).
static inline float max_of(const float* x, int64_t n) {
#if defined(MP_AVX512)
  if (n <= 16)
    return _mm512_reduce_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), (__mmask16)((1u << n) - 1), x));
#endif
  float m = -__builtin_inff();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

static inline float sum_of(const float* x, int64_t n) {
#if defined(MP_AVX512)
  if (n <= 16) return _mm512_reduce_add_ps(_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), x));
#endif
  float s[4] = {0.f, 0.f, 0.f, 0.f};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) s[k] += x[i + k];
  for (; i < n; ++i) s[0] += x[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

#if defined(MP_AVX512)
// Lane t of the result is the sum of the 16 lanes of v[t]: the 16 horizontal sums of a block's dot
// products in one tree of 45 shuffles and adds, instead of one reduction (and a scalar store) per dot.
static inline __m512 sum16(const __m512* v) {
  __m512 t[8], u[4];
  for (int k = 0; k < 8; ++k)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] of a = v[2k], b = v[2k+1]
    t[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int k = 0; k < 4; ++k)  // per 128-bit lane: the lane's sums of v[4k] .. v[4k + 3]
    u[k] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0x44),
                         _mm512_shuffle_ps(t[2 * k], t[2 * k + 1], 0xEE));
  // 128-bit lanes of x: sums of v[0..3] over lanes 0+1, 2+3, then of v[4..7]; y likewise for v[8..15]
  const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}

// scale * q_h . k of the nb (<= 16) key rows of a block for HG query heads q_h = q + h * C * 16 (C * 16 floats
// each), into w[h * kBlock + 0..16) (lanes past nb are 0): each key row is loaded once for the HG heads, whose
// queries stay in registers (HG * C of them), one FMA per 16 key elements and head, the 16 sums per head by sum16.
template <int C, int HG>
static inline void block_logits(const float* q, const char* K, int64_t k_row, int64_t nb, bool bf16,
                                float scale, float* w) {
  __m512 qv[HG][C], dots[HG][16];
#pragma GCC unroll 8
  for (int h = 0; h < HG; ++h)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) qv[h][c] = _mm512_loadu_ps(q + (h * C + c) * 16);
  for (int64_t t = 0; t < 16; ++t) {
    __m512 s0[HG], s1[HG];
#pragma GCC unroll 8
    for (int h = 0; h < HG; ++h) s0[h] = s1[h] = _mm512_setzero_ps();
    if (t < nb) {
      const char* row = K + t * k_row;
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m512 x = bf16 ? vload(reinterpret_cast<const uint16_t*>(row) + 16 * c)
                              : _mm512_loadu_ps(reinterpret_cast<const float*>(row) + 16 * c);
#pragma GCC unroll 8
        for (int h = 0; h < HG; ++h) {
          if (c % 2 == 0) s0[h] = _mm512_fmadd_ps(qv[h][c], x, s0[h]);
          else s1[h] = _mm512_fmadd_ps(qv[h][c], x, s1[h]);
        }
      }
    }
#pragma GCC unroll 8
    for (int h = 0; h < HG; ++h) dots[h][t] = _mm512_add_ps(s0[h], s1[h]);
  }
#pragma GCC unroll 8
  for (int h = 0; h < HG; ++h) _mm512_storeu_ps(w + h * kBlock, _mm512_mul_ps(sum16(dots[h]), _mm512_set1_ps(scale)));
}

// acc_h += sum_j w[h * kBlock + j] * row_j for HG heads (acc_h = acc + h * acc_stride, C * 16 floats) over the m
// value rows: each row is loaded once for the HG heads, whose accumulators stay in registers; per head the same
// sums in the same order as accumulate_rows.
template <int C, int HG>
static inline void accumulate_heads(float* acc, int64_t acc_stride, const float* w, const char* const* rows,
                                    int64_t m, bool bf16) {
  __m512 a[HG][C];
#pragma GCC unroll 8
  for (int h = 0; h < HG; ++h)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) a[h][c] = _mm512_loadu_ps(acc + h * acc_stride + 16 * c);
  for (int64_t j = 0; j < m; ++j) {
    __m512 wv[HG];
#pragma GCC unroll 8
    for (int h = 0; h < HG; ++h) wv[h] = _mm512_set1_ps(w[h * kBlock + j]);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 x = bf16 ? vload(reinterpret_cast<const uint16_t*>(rows[j]) + 16 * c)
                            : _mm512_loadu_ps(reinterpret_cast<const float*>(rows[j]) + 16 * c);
#pragma GCC unroll 8
      for (int h = 0; h < HG; ++h) a[h][c] = _mm512_fmadd_ps(wv[h], x, a[h][c]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < HG; ++h)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + h * acc_stride + 16 * c, a[h][c]);
}

// Heads per pass at a head dim of C * 16 floats: HG * C queries or accumulators held in registers (of 32).
template <int C>
constexpr int kHeadsPerPass = C == 4 ? 4 : 2;

// f.template operator()<HG>() with HG = hg (1 <= hg <= kHeadsPerPass<C>): a pass's head count as the template
// argument of block_logits / accumulate_heads.
template <int C, typename F>
static inline void with_heads(int hg, const F& f) {
  if (hg == 1) {
    f.template operator()<1>();
  } else if (hg == 2) {
    f.template operator()<2>();
  } else if constexpr (kHeadsPerPass<C> >= 4) {
    if (hg == 3) f.template operator()<3>();
    else f.template operator()<4>();
  }
}
#endif

// Kernel 5 body: exact attention of the G query heads of kv-head kvh of sequence b over the keys
// [t0, t1) (rows of a.k / a.v at their strides), the partial softmax state per head in part as kernel 3
// leaves it. Keys are read in order (the hardware prefetcher follows), blocks of kBlock tokens: the
// logits of every head of the group, then each head's accumulator over the block's value rows (still in
// cache). With AVX-512 and d = 64 or 128 both go a few heads per pass (with_heads), so that a pass loads each
// key / value row once for its heads instead of once per head: the kernel is bound by its loads and FMAs as
// much as by memory (3 kv-heads of 9 query heads, d = 64, on the 2-core AMD EPYC: 4096 keys warm 0.149 ms
// head by head, 0.101 in passes; 32768 keys from memory 1.69 / 1.47 ms; the same sums in the same order).
// Single-thread CPU time per (token, head) on warm data before the passes, with dot_row and scalar max / sum
// instead of block_logits, max_of and sum_of / with them: 9/3 heads, d = 64, float32 6.65 / 5.2-5.4 ns;
// 14/2, d = 64: 5.9 / 4.8; 32/8, d = 128: 11.3 / 9.2 (bfloat16 7.7 / 6.4, 7.4 / 6.2, 12.5 / 11.1).
void exact_range(const ExactArgs& a, int64_t b, int64_t kvh, int64_t t0, int64_t t1, float* part) {
  const int64_t d = a.d, G = a.H / a.Hkv, elt = a.bf16 ? 2 : 4;
  const char* K = static_cast<const char*>(a.k) + (b * a.k_stride[0] + kvh * a.k_stride[1]) * elt;
  const char* V = static_cast<const char*>(a.v) + (b * a.v_stride[0] + kvh * a.v_stride[1]) * elt;
  const int64_t k_row = a.k_stride[2] * elt, v_row = a.v_stride[2] * elt;
  const float* q0 = a.q + (b * a.H + kvh * G) * d;
  float w[64 * kBlock];
  const char* rows[kBlock];
  // AVX-512 with d = 64 or 128 (most models): a block's logits and value rows a few heads per pass, each row
  // loaded once per pass (block_logits, accumulate_heads)
#if defined(MP_AVX512)
  const bool heads_in_passes = d == 64 || d == 128;
  const int64_t per_pass = d == 64 ? kHeadsPerPass<4> : kHeadsPerPass<8>;
#else
  const bool heads_in_passes = false;
#endif
  for (int64_t g = 0; g < G; ++g) {
    float* p = part + g * (d + 2);
    p[0] = -__builtin_inff();
    p[1] = 0.f;
    for (int64_t i = 0; i < d; ++i) p[2 + i] = 0.f;
  }
  for (int64_t u0 = t0; u0 < t1; u0 += kBlock) {
    const int64_t nb = t1 - u0 < kBlock ? t1 - u0 : kBlock;
    for (int64_t t = 0; t < nb; ++t) rows[t] = V + (u0 + t) * v_row;
#if defined(MP_AVX512)
    if (heads_in_passes) {
      const char* Kb = K + u0 * k_row;
      for (int64_t g = 0; g < G; g += per_pass) {
        const int hg = static_cast<int>(G - g < per_pass ? G - g : per_pass);
        const float* q = q0 + g * d;
        float* wg = w + g * kBlock;
        if (d == 64) with_heads<4>(hg, [&]<int HG>() { block_logits<4, HG>(q, Kb, k_row, nb, a.bf16, a.scale, wg); });
        else with_heads<8>(hg, [&]<int HG>() { block_logits<8, HG>(q, Kb, k_row, nb, a.bf16, a.scale, wg); });
      }
    }
#endif
    if (!heads_in_passes) {
      for (int64_t t = 0; t < nb; ++t) {
        const char* krow = K + (u0 + t) * k_row;
        for (int64_t g = 0; g < G; ++g) w[g * kBlock + t] = a.scale * dot_row(q0 + g * d, krow, a.bf16, d);
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      float* acc = part + g * (d + 2);
      float* wg = w + g * kBlock;
      const float bm = max_of(wg, nb);
      if (bm > acc[0]) {
        if (acc[1] > 0.f) {
          const float c = __builtin_expf(acc[0] - bm);
          acc[1] *= c;
          for (int64_t i = 0; i < d; ++i) acc[2 + i] *= c;
        }
        acc[0] = bm;
      }
      for (int64_t t = 0; t < nb; ++t) wg[t] -= acc[0];
      exp_inplace(wg, nb);
      acc[1] += sum_of(wg, nb);
      if (!heads_in_passes) accumulate_rows(acc + 2, wg, rows, nb, a.bf16, d);
    }
#if defined(MP_AVX512)
    if (heads_in_passes) {
      for (int64_t g = 0; g < G; g += per_pass) {
        const int hg = static_cast<int>(G - g < per_pass ? G - g : per_pass);
        float* acc = part + g * (d + 2) + 2;
        const float* wg = w + g * kBlock;
        if (d == 64) with_heads<4>(hg, [&]<int HG>() { accumulate_heads<4, HG>(acc, d + 2, wg, rows, nb, a.bf16); });
        else with_heads<8>(hg, [&]<int HG>() { accumulate_heads<8, HG>(acc, d + 2, wg, rows, nb, a.bf16); });
      }
    }
#endif
  }
}
