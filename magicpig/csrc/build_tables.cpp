// Kernel 1: hash tables from key codes. For each (sequence b, kv-head h, table j) a counting sort of
// the valid rows i < counts[b] by their code gives CSR buckets: offsets[b,h,j, c .. c+1] bound the ids of
// bucket c, stored in increasing order (uint16 ids when n_max <= 65536, uint32 beyond). Work items are
// (b, h, block of TABLE_BLOCK tables) so that each pass over a row of codes reads one cache line.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "magicpig_cpu.h"

namespace magicpig {

static const int64_t TABLE_BLOCK = 16;

template <typename Id>
static bool build_block(const int32_t* codes, int64_t n, int64_t n_max, int64_t L, int K, int64_t j0,
                        int64_t j1, int32_t* offsets, Id* ids, std::vector<int32_t>& cursor) {
  const int64_t nb = int64_t(1) << K, stride = nb + 1;
  const int64_t nt = j1 - j0;
  for (int64_t j = j0; j < j1; ++j) std::fill(offsets + j * stride, offsets + (j + 1) * stride, 0);
  // pass 1: bucket sizes (shifted by one so that the prefix sum gives the starts)
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* row = codes + i * L;
    for (int64_t j = j0; j < j1; ++j) {
      const uint32_t c = static_cast<uint32_t>(row[j]);
      if (c >= static_cast<uint32_t>(nb)) return false;
      ++offsets[j * stride + c + 1];
    }
  }
  // pass 2: prefix sums; cursors start at each bucket's first slot
  cursor.resize(static_cast<size_t>(nt * nb));
  for (int64_t j = j0; j < j1; ++j) {
    int32_t* off = offsets + j * stride;
    for (int64_t c = 0; c < nb; ++c) off[c + 1] += off[c];
    std::copy(off, off + nb, cursor.begin() + (j - j0) * nb);
  }
  // pass 3: scatter ids (stable: each bucket lists its rows in increasing order)
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* row = codes + i * L;
    for (int64_t j = j0; j < j1; ++j) {
      ids[j * n_max + cursor[(j - j0) * nb + row[j]]++] = static_cast<Id>(i);
    }
  }
  return true;
}

bool build_tables(const int32_t* codes, const int64_t* counts, int64_t B, int64_t Hkv, int64_t n_max,
                  int64_t L, int K, int id_bytes, int32_t* offsets, void* ids, int threads) {
  const int64_t blocks = (L + TABLE_BLOCK - 1) / TABLE_BLOCK;
  const int64_t items = B * Hkv * blocks;
  const int64_t stride = (int64_t(1) << K) + 1;
  std::atomic<bool> ok(true);
#pragma omp parallel num_threads(threads)
  {
    std::vector<int32_t> cursor;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t bh = it / blocks, blk = it % blocks, b = bh / Hkv;
      const int64_t j0 = blk * TABLE_BLOCK, j1 = std::min(L, j0 + TABLE_BLOCK);
      const int64_t n = std::min<int64_t>(std::max<int64_t>(counts[b], 0), n_max);
      const int32_t* c = codes + bh * n_max * L;
      int32_t* off = offsets + bh * L * stride;
      bool good;
      if (id_bytes == 2) {
        good = build_block(c, n, n_max, L, K, j0, j1, off, static_cast<uint16_t*>(ids) + bh * L * n_max, cursor);
      } else {
        good = build_block(c, n, n_max, L, K, j0, j1, off, static_cast<uint32_t*>(ids) + bh * L * n_max, cursor);
      }
      if (!good) ok.store(false);
    }
  }
  return ok.load();
}

}  // namespace magicpig
