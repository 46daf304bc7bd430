// Kernel 3 body: importance-weighted sparse attention for one kv-head group over a list of retrieved
// tokens (attend_group, at the end). Included by attend_scalar.cpp / attend_avx2.cpp /
// attend_avx512.cpp inside their own namespace after a `#pragma GCC target`, with exactly one of
// MP_AVX512 / MP_AVX2 defined (or none for the scalar variant). Uses no library templates, only the
// vector primitives below.
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

#if defined(MP_AVX512)
static inline __m512 load16_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
#elif defined(MP_AVX2)
static inline __m256 load8_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// q . k for a float32 query and a float32 / bf16 key row.
static inline float dot_row(const float* q, const void* row, bool bf16, int64_t d) {
  int64_t i = 0;
  float acc = 0.f;
  if (bf16) {
    const uint16_t* k = static_cast<const uint16_t*>(row);
#if defined(MP_AVX512)
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (; i + 32 <= d; i += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16_bf16(k + i), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), load16_bf16(k + i + 16), s1);
    }
    for (; i + 16 <= d; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16_bf16(k + i), s0);
    acc = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
#elif defined(MP_AVX2)
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    for (; i + 32 <= d; i += 32) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8_bf16(k + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8_bf16(k + i + 8), s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), load8_bf16(k + i + 16), s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), load8_bf16(k + i + 24), s3);
    }
    for (; i + 8 <= d; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8_bf16(k + i), s0);
    acc = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
#endif
    for (; i < d; ++i) acc += q[i] * bf16_to_f32(k[i]);
  } else {
    const float* k = static_cast<const float*>(row);
#if defined(MP_AVX512)
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (; i + 32 <= d; i += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(k + i + 16), s1);
    }
    for (; i + 16 <= d; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), s0);
    acc = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
#elif defined(MP_AVX2)
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    for (; i + 32 <= d; i += 32) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), s1);
      s2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), _mm256_loadu_ps(k + i + 16), s2);
      s3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), _mm256_loadu_ps(k + i + 24), s3);
    }
    for (; i + 8 <= d; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), s0);
    acc = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
#endif
    for (; i < d; ++i) acc += q[i] * k[i];
  }
  return acc;
}

// acc += w * v for a float32 / bf16 value row.
static inline void axpy_row(float* acc, float w, const void* row, bool bf16, int64_t d) {
  int64_t i = 0;
#if defined(MP_AVX512)
  const __m512 vw = _mm512_set1_ps(w);
  if (bf16) {
    const uint16_t* v = static_cast<const uint16_t*>(row);
    for (; i + 16 <= d; i += 16)
      _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(vw, load16_bf16(v + i), _mm512_loadu_ps(acc + i)));
  } else {
    const float* v = static_cast<const float*>(row);
    for (; i + 16 <= d; i += 16)
      _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(vw, _mm512_loadu_ps(v + i), _mm512_loadu_ps(acc + i)));
  }
#elif defined(MP_AVX2)
  const __m256 vw = _mm256_set1_ps(w);
  if (bf16) {
    const uint16_t* v = static_cast<const uint16_t*>(row);
    for (; i + 8 <= d; i += 8)
      _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vw, load8_bf16(v + i), _mm256_loadu_ps(acc + i)));
  } else {
    const float* v = static_cast<const float*>(row);
    for (; i + 8 <= d; i += 8)
      _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vw, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
  }
#endif
  if (bf16) {
    const uint16_t* v = static_cast<const uint16_t*>(row);
    for (; i < d; ++i) acc[i] += w * bf16_to_f32(v[i]);
  } else {
    const float* v = static_cast<const float*>(row);
    for (; i < d; ++i) acc[i] += w * v[i];
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

// Three passes over the U tokens (ids sorted, masks = heads of the group that sampled each token):
//   1. keys: logit of every (token, head) pair -> w[pair]; running maximum per head
//   2. w[pair] = exp(logit - max of its head); sum per head
//   3. values: acc[head] += w[pair] * v
// Passes 1 and 3 have no dependency between consecutive tokens, so the out-of-order core overlaps the
// row loads and dot products of several tokens; rows are prefetched a.prefetch tokens ahead.
void attend_group(const AttendArgs& a, int64_t b, int64_t kvh, const uint32_t* ids, const uint64_t* masks,
                  int64_t U, float* w, float* part) {
  const int64_t d = a.d, G = a.H / a.Hkv;
  const int64_t elt = a.bf16 ? 2 : 4, row_bytes = d * elt, token_bytes = 2 * row_bytes;
  const int64_t base = (b * a.Hkv + kvh) * a.n_max;  // first token of this (sequence, kv-head)
  const char* KV = static_cast<const char*>(a.kv) + base * token_bytes;
  const float* norms = a.norms + base;
  const float* q0 = a.q + (b * a.H + kvh * G) * d;
  const int64_t ahead = a.prefetch;

  float qnorm[64], mx[64];
  for (int64_t g = 0; g < G; ++g) {
    float* p = part + g * (d + 2);
    p[0] = -__builtin_inff();
    p[1] = 0.f;
    for (int64_t i = 0; i < d; ++i) p[2 + i] = 0.f;
    float s = 0.f;
    for (int64_t i = 0; i < d; ++i) s += q0[g * d + i] * q0[g * d + i];
    s = __builtin_sqrtf(s);
    qnorm[g] = s > 1e-12f ? s : 1e-12f;
    mx[g] = -__builtin_inff();
  }
  // pass 1: keys
  // (the whole token, key and value, is fetched here: one contiguous block per token; pass 3 then finds
  // the value rows in cache when the item is small enough)
  for (int64_t u = 0; u < U && u < ahead; ++u) prefetch_row(KV + ids[u] * token_bytes, token_bytes);
  int64_t pair = 0;
  for (int64_t u = 0; u < U; ++u) {
    if (u + ahead < U) prefetch_row(KV + ids[u + ahead] * token_bytes, token_bytes);
    const int64_t id = ids[u];
    const char* krow = KV + id * token_bytes;
    float kn = norms[id];
    kn = kn > 1e-12f ? kn : 1e-12f;
    for (uint64_t mask = masks[u]; mask; mask &= mask - 1) {
      const int64_t g = __builtin_ctzll(mask);
      const float dot = dot_row(q0 + g * d, krow, a.bf16, d);
      const float logit = a.scale * dot + correction(dot / qnorm[g] / kn, a);
      w[pair++] = logit;
      mx[g] = logit > mx[g] ? logit : mx[g];
    }
  }
  const int64_t pairs = pair;
  // pass 2: weights
  pair = 0;
  for (int64_t u = 0; u < U; ++u)
    for (uint64_t mask = masks[u]; mask; mask &= mask - 1) w[pair++] -= mx[__builtin_ctzll(mask)];
  exp_inplace(w, pairs);
  // pass 3: values
  for (int64_t u = 0; u < U && u < ahead; ++u) prefetch_row(KV + ids[u] * token_bytes + row_bytes, row_bytes);
  pair = 0;
  for (int64_t u = 0; u < U; ++u) {
    if (u + ahead < U) prefetch_row(KV + ids[u + ahead] * token_bytes + row_bytes, row_bytes);
    const char* vrow = KV + static_cast<int64_t>(ids[u]) * token_bytes + row_bytes;
    for (uint64_t mask = masks[u]; mask; mask &= mask - 1) {
      const int64_t g = __builtin_ctzll(mask);
      float* p = part + g * (d + 2);
      const float wp = w[pair++];
      p[1] += wp;
      axpy_row(p + 2, wp, vrow, a.bf16, d);
    }
  }
  for (int64_t g = 0; g < G; ++g) part[g * (d + 2)] = mx[g];
}
