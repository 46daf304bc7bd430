// Kernel 5 driver: exact attention of one decode query per head (see magicpig_cpu.h). Work items are
// (sequence, kv-head, token range); there are at least two per thread, each of at least kMinTokens keys,
// so the few kv-heads of a GQA model still keep every thread streaming. Partial states merge as in
// kernel 3.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "magicpig_cpu.h"

namespace magicpig {

// 64 keys: a decode step's static part (sinks, local window, generated keys; a few hundred rows) still splits,
// so 3 kv-heads on 2 threads do not leave one thread idle for a third of it
static constexpr int64_t kMinTokens = 64;

void exact_attend(const ExactArgs& a, int isa, float* out, float* lse, int threads) {
  const ExactRangeFn fn = MP_VARIANT_FN(isa, exact_range);
  const int64_t G = a.H / a.Hkv, d = a.d, groups = a.B * a.Hkv;
  int64_t splits = std::max<int64_t>(1, (2 * threads + groups - 1) / groups);
  splits = std::max<int64_t>(1, std::min(splits, a.n / kMinTokens));
  const int64_t items = groups * splits, part_size = G * (d + 2);
  thread_local std::vector<float> parts;  // per-thread scratch (grow)
  grow(parts, items * part_size);
  float* const part = parts.data();  // the threads below share this thread's array (a thread_local names their own)
  const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t grp = it / splits, s = it % splits;
      fn(a, grp / a.Hkv, grp % a.Hkv, s * a.n / splits, (s + 1) * a.n / splits, part + it * part_size);
    }
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < a.B * a.H; ++bh)
      merge_parts(part, splits, G, d, a.q, a.H, a.Hkv, bh, out, lse, a.prior_out, a.prior_lse);
  }
}

}  // namespace magicpig
