// The random-row probe (gather_rows in magicpig_cpu.h), compiled per ISA variant like kernels 3-5: each row
// is read with the variant's widest loads, as the kernels read their rows. Read as 8-byte words (what the
// baseline flags compile), rows of 0.5-1 KB came in at 13-17.5 GB/s where 64-byte loads reach 17-24 GB/s
// on the same rows in the same minutes (AMD EPYC, 2 threads), so the probe understated what random reads
// can reach and the attention kernel looked as fast as its ceiling. The result is the xor of the rows'
// 8-byte words whatever the variant.

// xor of the nbytes / 8 words at p (nbytes a multiple of 8).
static inline uint64_t xor_words(const char* p, int64_t nbytes) {
  int64_t i = 0;
  uint64_t r = 0;
#if defined(MP_AVX512)
  __m512i a = _mm512_setzero_si512(), b = a, c = a, e = a;
  for (; i + 256 <= nbytes; i += 256) {
    a = _mm512_xor_si512(a, _mm512_loadu_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_loadu_si512(p + i + 64));
    c = _mm512_xor_si512(c, _mm512_loadu_si512(p + i + 128));
    e = _mm512_xor_si512(e, _mm512_loadu_si512(p + i + 192));
  }
  for (; i + 64 <= nbytes; i += 64) a = _mm512_xor_si512(a, _mm512_loadu_si512(p + i));
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, e)));
  for (int l = 0; l < 8; ++l) r ^= lanes[l];
#elif defined(MP_AVX2)
  __m256i a = _mm256_setzero_si256(), b = a, c = a, e = a;
  for (; i + 128 <= nbytes; i += 128) {
    a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    e = _mm256_xor_si256(e, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  for (; i + 32 <= nbytes; i += 32)
    a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, e)));
  for (int l = 0; l < 4; ++l) r ^= lanes[l];
#endif
  for (; i < nbytes; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p + i, 8);
    r ^= w;
  }
  return r;
}

uint64_t gather_rows(const void* data, int64_t row_bytes, const int64_t* rows, int64_t count, int prefetch,
                     int threads) {
  const char* base = static_cast<const char*>(data);
  uint64_t result = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(^ : result)
  for (int64_t i = 0; i < count; ++i) {
    if (i + prefetch < count) prefetch_row(base + rows[i + prefetch] * row_bytes, row_bytes);  // attend_impl.h
    result ^= xor_words(base + rows[i] * row_bytes, row_bytes);
  }
  return result;
}
