// Kernel 4 driver: the decode linear layers (see magicpig_cpu.h). The output rows of all the parts, in
// blocks of kLinearRows, are split over the threads in contiguous ranges, so that each thread streams its
// share of the weights front to back.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "magicpig_cpu.h"

namespace magicpig {

using LinearBlockFn = void (*)(const LinearArgs&, int64_t, int64_t);

static LinearBlockFn select_linear(int isa) {
  if (isa == kAvx512 && cpu_supports(kAvx512)) return avx512::linear_block;
  if (isa == kAvx2 && cpu_supports(kAvx2)) return avx2::linear_block;
  return scalar::linear_block;
}

void linear(const LinearArgs* parts, int64_t count, int isa, int threads) {
  const LinearBlockFn fn = select_linear(isa);
  std::vector<int64_t> first(count + 1, 0);  // parts[p] owns the global blocks first[p] .. first[p + 1) - 1
  for (int64_t p = 0; p < count; ++p) first[p + 1] = first[p] + (parts[p].O + kLinearRows - 1) / kLinearRows;
  const int64_t blocks = first[count];
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(threads, blocks));
  auto run = [&](int64_t b0, int64_t b1) {
    int64_t p = 0;
    for (int64_t blk = b0; blk < b1; ++blk) {
      while (blk >= first[p + 1]) ++p;
      const int64_t o = (blk - first[p]) * kLinearRows;
      fn(parts[p], o, std::min(kLinearRows, parts[p].O - o));
    }
  };
  if (nt == 1) {
    run(0, blocks);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(nt))
  {
    const int64_t t = omp_get_thread_num();
    run(t * blocks / nt, (t + 1) * blocks / nt);
  }
}

}  // namespace magicpig
