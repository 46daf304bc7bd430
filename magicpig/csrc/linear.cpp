// Kernel 4 driver: the decode linear layers (see magicpig_cpu.h). The output rows of all the parts, in
// blocks of kLinearRows, are split over the threads in contiguous ranges, so that each thread streams its
// share of the weights front to back.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "magicpig_cpu.h"

namespace magicpig {

// linear's per-call arrays, grown to the largest call seen and reused (one per calling thread): a decode step
// calls linear a few times per layer, and the heap's allocations cost microseconds each on its cold caches
struct LinearScratch {
  std::vector<LinearArgs> parts;
  std::vector<int8_t> xq;
  std::vector<float> xd;
  std::vector<int64_t> first;
};

void linear(const LinearArgs* given, int64_t count, int isa, int threads) {
  const auto fn = MP_VARIANT_FN(isa, linear_block);
  const auto quantize = MP_VARIANT_FN(isa, quantize_q8);
  thread_local LinearScratch scratch;
  std::vector<LinearArgs>& parts = scratch.parts;
  parts.assign(given, given + count);
  // parts reading q8_0 weights get their input quantized once (parts that share an input share it): the
  // first such part of each input is its owner, sized here, quantized below
  auto owner = [&](int64_t p) {
    int64_t same = 0;
    while (same < p && !(parts[same].w_format == kWeightQ8 && parts[same].x == parts[p].x)) ++same;
    return same;
  };
  size_t nq = 0, nd = 0;
  for (int64_t p = 0; p < count; ++p)
    if (parts[p].w_format == kWeightQ8 && owner(p) == p) {
      nq += static_cast<size_t>(parts[p].M * parts[p].I);
      nd += static_cast<size_t>(parts[p].M * (parts[p].I / kQ8Block));
    }
  grow(scratch.xq, static_cast<int64_t>(nq));
  grow(scratch.xd, static_cast<int64_t>(nd));
  nq = nd = 0;
  for (int64_t p = 0; p < count; ++p) {
    if (parts[p].w_format != kWeightQ8) continue;
    const int64_t same = owner(p);
    if (same < p) {
      parts[p].xq = parts[same].xq;
      parts[p].xd = parts[same].xd;
      continue;
    }
    const int64_t M = parts[p].M, I = parts[p].I;
    parts[p].xq = scratch.xq.data() + nq;
    parts[p].xd = scratch.xd.data() + nd;
    quantize(parts[p].x, M, I, scratch.xq.data() + nq, scratch.xd.data() + nd);
    nq += static_cast<size_t>(M * I);
    nd += static_cast<size_t>(M * (I / kQ8Block));
  }
  std::vector<int64_t>& first = scratch.first;
  first.assign(static_cast<size_t>(count + 1), 0);  // parts[p] owns the global blocks first[p] .. first[p + 1) - 1
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
