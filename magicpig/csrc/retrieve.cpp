// Kernel 2: retrieval. For query head (b, h) of kv-head h / G, read the query's bucket in each of the
// L tables and count, per token, how many buckets it appeared in; a token whose count reaches
// min_collisions gets its bit set in bits[b, h].
// min_collisions == 2 (the paper's rule) and L <= 255: a byte per token counts its buckets (one load and one
// store per bucket entry), then one pass over the counters writes each 64 of them as an output word (count >= 2)
// and zeroes them for the next query. Against two bitsets updated without branches ("seen once" and the output:
// out |= once & bit; once |= bit; two loads and two stores per entry into words that the nearby entries also
// update), still used for L > 255 and min_collisions == 1 (out |= bit): the 32K SmolLM2 step 1.0 ms faster
// (median of 8 alternations in one process), retrieval 8% of its samples instead of 11%.
// min_collisions > 2: uint8 counters saturating at min_collisions. Counters
// are never reset per query: each query counts from a fresh base (value = base + count, anything <= base
// reads as 0) and the thread's counter array is cleared only when the 8-bit base would overflow, so a
// query costs O(bucket entries), not O(n). Bucket bounds are
// fetched for all tables first (with prefetches), then every cache line of the L id lists is loaded
// once before any is counted, so that many misses are in flight.
#include <omp.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <vector>

#include "magicpig_cpu.h"

namespace magicpig {

// Bits set in the W words of x. The baseline x86-64 flags have no popcnt instruction; on x86 (GCC) a
// clone compiled with it is picked at load time where the CPU has one (about 4% of a retrieval at
// n = 64K, against the bit-twiddling count the default clone compiles to).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__)  // ifunc
__attribute__((target_clones("popcnt", "default")))
#endif
static int popcount_words(const uint64_t* x, int64_t W) {
  int found = 0;
  for (int64_t w = 0; w < W; ++w) found += __builtin_popcountll(x[w]);
  return found;
}

// Bit t of the result: c[t] >= 2, for the 64 counters at c, which are set to zero.
static inline uint64_t twice_mask(uint8_t* c) {
  uint64_t word = 0;
#if defined(__SSE2__)
  const __m128i two = _mm_set1_epi8(2), zero = _mm_setzero_si128();
  for (int k = 0; k < 4; ++k) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16 * k));
    const int ge = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(v, two), v));  // max(v, 2) == v: v >= 2
    word |= static_cast<uint64_t>(static_cast<uint16_t>(ge)) << (16 * k);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c + 16 * k), zero);
  }
#else
  for (int k = 0; k < 64; ++k) {
    word |= static_cast<uint64_t>(c[k] >= 2) << k;
    c[k] = 0;
  }
#endif
  return word;
}

// Per-thread counters, kept across calls (OpenMP reuses its threads).
struct Counters {
  std::vector<uint8_t> per_token;  // min_collisions == 2: a count per token, zero between queries (twice_mask)
  std::vector<uint8_t> value;
  std::vector<uint64_t> once;
  unsigned base = 0;
  unsigned sink = 0;  // sum of the touching loads (so that they are kept)
  // a cleared bitset of W words
  uint64_t* seen(int64_t W) {
    grow(once, W);
    std::memset(once.data(), 0, static_cast<size_t>(W) * sizeof(uint64_t));
    return once.data();
  }
  // n zero counters (per_token)
  uint8_t* zeroed(int64_t n) {
    if (static_cast<int64_t>(per_token.size()) < n) per_token.assign(static_cast<size_t>(n), 0);
    return per_token.data();
  }
  // make room for n tokens and a fresh base for a query needing m more values; returns the base
  unsigned fresh(int64_t n, int m) {
    if (static_cast<int64_t>(value.size()) < n || base + static_cast<unsigned>(m) > 255u) {
      value.assign(std::max<size_t>(value.size(), static_cast<size_t>(n)), 0);
      base = 0;
    }
    const unsigned b = base;
    base += static_cast<unsigned>(m);
    return b;
  }
};
static thread_local Counters counters;

template <typename Id>
static void retrieve_head(const Tables& t, int64_t bh_kv, const int32_t* qc, int m, int64_t* lo, int64_t* hi,
                          uint64_t* bits, int32_t* sampled, int64_t* entries) {
  const int64_t stride = (int64_t(1) << t.K) + 1;
  const int32_t* off = t.offsets + bh_kv * t.L * stride;
  const Id* ids = static_cast<const Id*>(t.ids) + bh_kv * t.L * t.n_max;
  for (int64_t j = 0; j < t.L; ++j) __builtin_prefetch(off + j * stride + qc[j], 0, 1);
  int64_t total = 0;
  for (int64_t j = 0; j < t.L; ++j) {
    const int32_t* o = off + j * stride + qc[j];
    lo[j] = j * t.n_max + o[0];
    hi[j] = j * t.n_max + o[1];
    total += o[1] - o[0];
  }
  // Touch every cache line of the L lists with plain loads before counting. Prefetch instructions in
  // such a burst are (in part) dropped once the core's few miss slots are full, and the lists then miss
  // one after the other while they are counted; a load waits for a slot instead. Measured: a cold
  // retrieval at n = 64K, (10, 150) takes 15% less time than with the prefetch burst.
  unsigned touch = 0;
  for (int64_t j = 0; j < t.L; ++j) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(ids + lo[j]) & ~uintptr_t(63);
    const uintptr_t last = reinterpret_cast<uintptr_t>(ids + hi[j]);
    for (uintptr_t p = first; p < last; p += 64) touch += *reinterpret_cast<const volatile uint8_t*>(p);
  }
  counters.sink += touch;
  int32_t found = 0;
  if (m == 2 && t.L <= 255) {
    const int64_t W = (t.n_max + 63) / 64;
    uint8_t* __restrict count = counters.zeroed(W * 64);
    for (int64_t j = 0; j < t.L; ++j) {
      const Id* const end = ids + hi[j];
      for (const Id* e = ids + lo[j]; e < end; ++e) ++count[*e];
    }
    for (int64_t w = 0; w < W; ++w) bits[w] = twice_mask(count + w * 64);
    *sampled = popcount_words(bits, W);
    *entries = total;
    return;
  }
  if (m <= 2) {
    const int64_t W = (t.n_max + 63) / 64;
    uint64_t* __restrict once = counters.seen(W);
    uint64_t* __restrict out = bits;
    for (int64_t j = 0; j < t.L; ++j) {
      const Id* __restrict e = ids + lo[j];
      const Id* const end = ids + hi[j];
      if (m == 2) {
        for (; e < end; ++e) {
          const uint32_t id = *e;
          const uint64_t bit = uint64_t(1) << (id & 63), word = once[id >> 6];
          out[id >> 6] |= word & bit;
          once[id >> 6] = word | bit;
        }
      } else {
        for (; e < end; ++e) out[*e >> 6] |= uint64_t(1) << (*e & 63);
      }
    }
    *sampled = popcount_words(out, W);
    *entries = total;
    return;
  }
  const unsigned base = counters.fresh(t.n_max, m), target = base + static_cast<unsigned>(m);
  uint8_t* count = counters.value.data();
  for (int64_t j = 0; j < t.L; ++j) {
    const Id* const end = ids + hi[j];
    for (const Id* e = ids + lo[j]; e < end; ++e) {
      const uint32_t id = *e;
      const unsigned v = count[id];
      const unsigned c = v > base ? v : base;  // stale values (<= base) count as zero
      if (c < target) {
        count[id] = static_cast<uint8_t>(c + 1);
        if (c + 1 == target) {
          bits[id >> 6] |= uint64_t(1) << (id & 63);
          ++found;
        }
      }
    }
  }
  *sampled = found;
  *entries = total;
}

void retrieve(const Tables& t, const int32_t* q_codes, int64_t H, int min_collisions, uint64_t* bits,
              int32_t* sampled, int64_t* entries, int threads) {
  const int64_t G = H / t.Hkv, W = (t.n_max + 63) / 64;
#pragma omp parallel num_threads(threads)
  {
    thread_local std::vector<int64_t> tls_lo, tls_hi;  // per-thread scratch (grow)
    std::vector<int64_t>& lo = tls_lo;
    std::vector<int64_t>& hi = tls_hi;
    grow(lo, t.L);
    grow(hi, t.L);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < t.B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      uint64_t* row = bits + bh * W;
      std::memset(row, 0, static_cast<size_t>(W) * sizeof(uint64_t));
      const int64_t bh_kv = b * t.Hkv + h / G;
      if (t.id_bytes == 2) {
        retrieve_head<uint16_t>(t, bh_kv, q_codes + bh * t.L, min_collisions, lo.data(),
                                hi.data(), row, sampled + bh, entries + bh);
      } else {
        retrieve_head<uint32_t>(t, bh_kv, q_codes + bh * t.L, min_collisions, lo.data(),
                                hi.data(), row, sampled + bh, entries + bh);
      }
    }
  }
}

}  // namespace magicpig
