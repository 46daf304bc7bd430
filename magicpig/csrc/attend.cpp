// Kernel 3 driver: importance-weighted sparse attention batched over (sequence, kv-head, token range).
// Each work item lists the union of the tokens sampled by the query heads of one kv-head group (from
// the retrieval bitsets, in increasing token order) and hands it to the ISA variant of attend_group,
// which reads every key / value row once for all heads of the group that sampled it. Partial softmax
// states of the token ranges are merged by their maxima and sums at the end.
#include <omp.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "magicpig_cpu.h"

namespace magicpig {

bool cpu_supports(int isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (isa == kAvx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == kAvx512)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
#endif
  return isa == kScalar;
}

float exact_correction(float cos, int K, int L, int min_collisions) {
  const double c = std::min(1.0, std::max(-1.0, static_cast<double>(cos)));
  const double p = 1.0 - std::acos(c) / M_PI;
  const double P = std::pow(p, K), Q = 1.0 - P;
  double below = 0.0, binom = 1.0;  // sum_{i < m} C(L, i) P^i Q^(L - i)
  for (int i = 0; i < min_collisions; ++i) {
    below += binom * std::pow(P, i) * std::pow(Q, L - i);
    binom = binom * (L - i) / (i + 1);
  }
  const double u = std::min(1.0, std::max(0.0, 1.0 - below));
  return -std::log(static_cast<float>(u) + 1e-4f);
}

static bool finite_row(const float* x, int64_t d) {
  for (int64_t i = 0; i < d; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

void attend(const AttendArgs& a, int isa, float* out, float* lse, int threads) {
  const AttendGroupFn fn = MP_VARIANT_FN(isa, attend_group);
  const ListTokensFn list = MP_VARIANT_FN(isa, list_tokens);
  const int64_t G = a.H / a.Hkv, W = (a.n_max + 63) / 64, d = a.d;
  const int64_t groups = a.B * a.Hkv;
  // split each group's token range into items of about split_tokens tokens, and at least two items per
  // thread, so that dynamic scheduling balances groups that sampled very different numbers of tokens
  int64_t splits = std::max<int64_t>(1, (2 * threads + groups - 1) / groups);
  if (a.split_tokens > 0) splits = std::max(splits, (a.n_max + a.split_tokens - 1) / a.split_tokens);
  splits = std::max<int64_t>(1, std::min(splits, W));
  const int64_t items = groups * splits, part_size = G * (d + 2);
  thread_local std::vector<float> parts;  // per-thread scratch, as the token lists below (grow)
  grow(parts, items * part_size);
  float* const part = parts.data();  // the threads below share this thread's array (a thread_local names their own)
#pragma omp parallel num_threads(threads)
  {
    thread_local std::vector<uint32_t> tls_ids;
    thread_local std::vector<uint64_t> tls_masks;
    std::vector<uint32_t>& ids = tls_ids;  // one lookup of the thread's storage, not one per use
    std::vector<uint64_t>& masks = tls_masks;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t grp = it / splits, s = it % splits, b = grp / a.Hkv, kvh = grp % a.Hkv;
      const int64_t w0 = s * W / splits, w1 = (s + 1) * W / splits;
      grow(ids, (w1 - w0) * 64 + kListSlack);
      grow(masks, (w1 - w0) * 64 + kListSlack);
      const int64_t U = list(a.bits + (b * a.H + kvh * G) * W, G, W, w0, w1, ids.data(), masks.data());
      fn(a, b, kvh, ids.data(), masks.data(), U, part + it * part_size);
    }
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < a.B * a.H; ++bh) merge_parts(part, splits, G, d, a.q, a.H, a.Hkv, bh, out, lse);
  }
}

void merge_parts(const float* parts, int64_t splits, int64_t G, int64_t d, const float* q, int64_t H,
                 int64_t Hkv, int64_t bh, float* out, float* lse, const float* prior_out,
                 const float* prior_lse) {
  const int64_t b = bh / H, h = bh % H, grp = b * Hkv + h / G, g = h % G, part_size = G * (d + 2);
  const float prior_m = prior_out ? prior_lse[bh] : -std::numeric_limits<float>::infinity();
  float m = prior_m == prior_m ? prior_m : -std::numeric_limits<float>::infinity();  // NaN: the q check below
  for (int64_t s = 0; s < splits; ++s) m = std::max(m, parts[(grp * splits + s) * part_size + g * (d + 2)]);
  float* o = out + bh * d;
  if (!finite_row(q + bh * d, d)) {  // a caller bug: NaN out, as the torch reference gives
    std::fill(o, o + d, std::numeric_limits<float>::quiet_NaN());
    lse[bh] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  std::fill(o, o + d, 0.f);
  if (m == -std::numeric_limits<float>::infinity()) {
    lse[bh] = m;
    return;
  }
  float l = 0.f;
  if (prior_m > -std::numeric_limits<float>::infinity()) {
    const float c = std::exp(prior_m - m);
    l += c;
    const float* po = prior_out + bh * d;
    for (int64_t i = 0; i < d; ++i) o[i] += c * po[i];
  }
  for (int64_t s = 0; s < splits; ++s) {
    const float* p = parts + (grp * splits + s) * part_size + g * (d + 2);
    if (p[0] == -std::numeric_limits<float>::infinity()) continue;
    const float c = std::exp(p[0] - m);
    l += c * p[1];
    for (int64_t i = 0; i < d; ++i) o[i] += c * p[2 + i];
  }
  for (int64_t i = 0; i < d; ++i) o[i] /= l;
  lse[bh] = m + std::log(l);
}

void advise_huge_pages(void* data, int64_t nbytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t huge = uintptr_t(1) << 21;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(data) + huge - 1) & ~(huge - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(nbytes)) & ~(huge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)data;
  (void)nbytes;
#endif
}

uint64_t stream_read(const void* data, int64_t nbytes, int threads) {
  const uint64_t* p = static_cast<const uint64_t*>(data);
  const int64_t words = nbytes / 8;
  uint64_t result = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(^ : result)
  for (int64_t i = 0; i < words; ++i) result ^= p[i];
  return result;
}

uint64_t gather_rows(const void* data, int64_t row_bytes, const int64_t* rows, int64_t count, int prefetch,
                     int threads, int isa) {
  if (isa < 0) isa = kAvx512;  // the best variant, where the CPU runs it
  return MP_VARIANT_FN(isa, gather_rows)(data, row_bytes, rows, count, prefetch, threads);
}

}  // namespace magicpig
