// Kernel 4 driver: the decode linear layer (see magicpig_cpu.h). Each thread takes one contiguous range
// of output rows, a multiple of kLinearRows, so that it streams its part of W front to back.
#include <omp.h>

#include <algorithm>

#include "magicpig_cpu.h"

namespace magicpig {

using LinearBlockFn = void (*)(const LinearArgs&, int64_t, int64_t);

static LinearBlockFn select_linear(int isa) {
  if (isa == kAvx512 && cpu_supports(kAvx512)) return avx512::linear_block;
  if (isa == kAvx2 && cpu_supports(kAvx2)) return avx2::linear_block;
  return scalar::linear_block;
}

void linear(const LinearArgs& a, int isa, int threads) {
  const LinearBlockFn fn = select_linear(isa);
  const int64_t blocks = (a.O + kLinearRows - 1) / kLinearRows;
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(threads, blocks));
  if (nt == 1) {
    for (int64_t o = 0; o < a.O; o += kLinearRows) fn(a, o, std::min(kLinearRows, a.O - o));
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(nt))
  {
    const int64_t t = omp_get_thread_num();
    const int64_t b0 = t * blocks / nt, b1 = (t + 1) * blocks / nt;
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t o = blk * kLinearRows;
      fn(a, o, std::min(kLinearRows, a.O - o));
    }
  }
}

}  // namespace magicpig
