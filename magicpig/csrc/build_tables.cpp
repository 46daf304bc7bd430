// Kernel 1: hash tables from key codes. For each (sequence b, kv-head h, table j) a counting sort of
// the valid rows i < counts[b] by their code gives CSR buckets: offsets[b,h,j, c .. c+1] bound the ids of
// bucket c, stored in increasing order (uint16 ids when n_max <= 65536, uint32 beyond). Codes in row-major
// layout (B, Hkv, n_max, L): work items are (b, h, block of TABLE_BLOCK tables) so that each pass over a
// row of codes reads one cache line. Table-major codes (B, Hkv, L, n_max), as the decoder's hashing
// writes them: one item per table, whose codes, counters and ids then all stay in the L2 cache.
//
// Kernel 0 (hash_keys), the decoder set-up's hashing: SimHash codes of centred key rows computed in one
// pass, without materialising the (rows, K*L) float projections that ``x @ W`` would write and read back
// (at 32K keys that is 200 MB per kv-head per layer). Each work item centres a block of rows into a
// small buffer, multiplies it by the projections in register tiles and packs the signs into codes.
// The projections come tiled: each tile of 32 columns is one contiguous (d, 32) block, so a pass over the
// tiles reads memory in order. In the row-major (d, K*L) matrix a tile's d rows lay K*L floats apart, d
// interleaved streams that the hardware prefetcher did not follow: a decode step's query hashing (a few
// rows, the projections cold) read them at under half the streaming bandwidth.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "magicpig_cpu.h"

namespace magicpig {

static const int64_t TABLE_BLOCK = 16;

// codes of row i in table j at codes[i * rs + j * ts]
template <typename Id>
static bool build_block(const int32_t* codes, int64_t rs, int64_t ts, int64_t n, int64_t n_max, int K,
                        int64_t j0, int64_t j1, int32_t* offsets, Id* ids, std::vector<int32_t>& cursor) {
  const int64_t nb = int64_t(1) << K, stride = nb + 1;
  const int64_t nt = j1 - j0;
  for (int64_t j = j0; j < j1; ++j) std::fill(offsets + j * stride, offsets + (j + 1) * stride, 0);
  // pass 1: bucket sizes (shifted by one so that the prefix sum gives the starts)
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* row = codes + i * rs;
    for (int64_t j = j0; j < j1; ++j) {
      const uint32_t c = static_cast<uint32_t>(row[j * ts]);
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
    const int32_t* row = codes + i * rs;
    for (int64_t j = j0; j < j1; ++j) {
      ids[j * n_max + cursor[(j - j0) * nb + row[j * ts]]++] = static_cast<Id>(i);
    }
  }
  return true;
}

bool build_tables(const int32_t* codes, const int64_t* counts, int64_t B, int64_t Hkv, int64_t n_max,
                  int64_t L, int K, int id_bytes, int32_t* offsets, void* ids, int threads, bool table_major) {
  const int64_t block = table_major ? 1 : TABLE_BLOCK, blocks = (L + block - 1) / block;
  const int64_t rs = table_major ? 1 : L, ts = table_major ? n_max : 1;
  const int64_t items = B * Hkv * blocks;
  const int64_t stride = (int64_t(1) << K) + 1;
  std::atomic<bool> ok(true);
#pragma omp parallel num_threads(threads)
  {
    std::vector<int32_t> cursor;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t bh = it / blocks, blk = it % blocks, b = bh / Hkv;
      const int64_t j0 = blk * block, j1 = std::min(L, j0 + block);
      const int64_t n = std::min<int64_t>(std::max<int64_t>(counts[b], 0), n_max);
      const int32_t* c = codes + bh * n_max * L;
      int32_t* off = offsets + bh * L * stride;
      bool good;
      if (id_bytes == 2) {
        good = build_block(c, rs, ts, n, n_max, K, j0, j1, off, static_cast<uint16_t*>(ids) + bh * L * n_max,
                           cursor);
      } else {
        good = build_block(c, rs, ts, n, n_max, K, j0, j1, off, static_cast<uint32_t*>(ids) + bh * L * n_max,
                           cursor);
      }
      if (!good) ok.store(false);
    }
  }
  return ok.load();
}

// ---- kernel 0: hashing -------------------------------------------------------------------------------

namespace {

const int64_t HASH_ROWS = 240;  // rows per work item (a multiple of the row tile)
const int64_t HASH_RB = 6;        // the row tile of the key blocks
const int64_t HASH_RB_SMALL = 3;  // the row tile where every work item has at most this many rows

// Rows x (rows, d), a multiple of RB, times projections w in the tiled layout (KLp / kHashTile, d,
// kHashTile) of a (d, KLp) matrix: a register tile of RB rows by NV vectors of columns accumulates over d;
// the signs (> 0, as the torch reference's ``proj > 0``) go to
// sign (RB, KLp) and are packed into codes (rows_valid, L), bit b of table j = column j*K + b. Only the
// tables t0 .. t1 - 1 are computed (their columns, rounded out to whole tiles) and written.
template <typename V, int RB, int NV>
inline __attribute__((always_inline)) void hash_rows_impl(const float* x, int64_t rows, int64_t rows_valid,
                                                          int64_t d, const float* w, int64_t KLp, int K,
                                                          int64_t L, int64_t t0, int64_t t1, uint8_t* sign,
                                                          int32_t* codes) {
  constexpr int VL = sizeof(V) / sizeof(float), JW = VL * NV;
  static_assert(kHashTile % JW == 0, "a register tile must not straddle two projection tiles");
  const int64_t c0 = t0 * K / JW * JW, c1 = std::min(KLp, (t1 * K + JW - 1) / JW * JW);
  for (int64_t r0 = 0; r0 < rows; r0 += RB) {
    const float* xr = x + r0 * d;
    for (int64_t j0 = c0; j0 < c1; j0 += JW) {
      const float* wt = w + (j0 / kHashTile) * d * kHashTile + j0 % kHashTile;  // JW divides kHashTile
      V acc[RB][NV];
      for (int r = 0; r < RB; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = V{};
      for (int64_t k = 0; k < d; ++k) {
        V wk[NV];
        for (int v = 0; v < NV; ++v) std::memcpy(&wk[v], wt + k * kHashTile + v * VL, sizeof(V));
        for (int r = 0; r < RB; ++r) {
          const float xv = xr[r * d + k];
          for (int v = 0; v < NV; ++v) acc[r][v] += xv * wk[v];
        }
      }
      for (int r = 0; r < RB; ++r)
        for (int v = 0; v < NV; ++v)
          for (int l = 0; l < VL; ++l) sign[r * KLp + j0 + v * VL + l] = acc[r][v][l] > 0.f;
    }
    for (int r = 0; r < RB && r0 + r < rows_valid; ++r) {
      const uint8_t* sr = sign + r * KLp;
      int32_t* c = codes + (r0 + r) * L;
      for (int64_t j = t0; j < t1; ++j) {
        int32_t code = 0;
        for (int b = 0; b < K; ++b) code |= static_cast<int32_t>(sr[j * K + b]) << b;
        c[j] = code;
      }
    }
  }
}

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
using HashRowsFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int, int64_t,
                            int64_t, int64_t, uint8_t*, int32_t*);

// Each variant in two row tiles: HASH_RB rows (the decoder set-up's blocks of keys) and HASH_RB_SMALL rows
// (a decode step's query heads of one kv-head, typically 2-4, which the larger tile would pad with zero
// rows: at 3 rows, half its multiply-adds). Each code is the same in both: every column's sum runs over d
// in order.
#define MP_HASH_VARIANTS(NAME, TARGET, V)                                                                   \
  TARGET void NAME(const float* x, int64_t rows, int64_t rows_valid, int64_t d, const float* w,              \
                   int64_t KLp, int K, int64_t L, int64_t t0, int64_t t1, uint8_t* sign, int32_t* codes) {     \
    hash_rows_impl<V, HASH_RB, 2>(x, rows, rows_valid, d, w, KLp, K, L, t0, t1, sign, codes);                 \
  }                                                                                                         \
  TARGET void NAME##_small(const float* x, int64_t rows, int64_t rows_valid, int64_t d, const float* w,      \
                           int64_t KLp, int K, int64_t L, int64_t t0, int64_t t1, uint8_t* sign,             \
                           int32_t* codes) {                                                                \
    hash_rows_impl<V, HASH_RB_SMALL, 2>(x, rows, rows_valid, d, w, KLp, K, L, t0, t1, sign, codes);           \
  }

#if defined(__x86_64__) || defined(__i386__)
MP_HASH_VARIANTS(hash_rows_avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))), v16f)
MP_HASH_VARIANTS(hash_rows_avx2, __attribute__((target("avx2,fma"))), v8f)
#endif
MP_HASH_VARIANTS(hash_rows_scalar, , v4f)
#undef MP_HASH_VARIANTS

// The variant for `isa` with a row tile of HASH_RB_SMALL rows (small) or HASH_RB.
HashRowsFn select_hash(int isa, bool small) {
#if defined(__x86_64__) || defined(__i386__)
  if (isa == kAvx512 && cpu_supports(kAvx512)) return small ? hash_rows_avx512_small : hash_rows_avx512;
  if (isa == kAvx2 && cpu_supports(kAvx2)) return small ? hash_rows_avx2_small : hash_rows_avx2;
#endif
  return small ? hash_rows_scalar_small : hash_rows_scalar;
}

}  // namespace

void hash_keys(const float* keys, int64_t B, int64_t Hkv, int64_t n, int64_t d, const float* center,
               const float* proj, int64_t S, int64_t P, int K, int64_t L, const int64_t* lo,
               const int64_t* count, int64_t m, int32_t* codes, bool table_major, int isa, int threads) {
  // rows of an item are at most min(m, HASH_ROWS): a decode step's few query rows take the small tile
  const bool small = m <= HASH_RB_SMALL;
  const int64_t rb = small ? HASH_RB_SMALL : HASH_RB;
  const HashRowsFn fn = select_hash(isa, small);
  const int64_t KLp = P;  // a multiple of kHashTile (the caller tiles the projections once)
  const float* w0 = proj;
  std::memset(codes, 0, sizeof(int32_t) * B * Hkv * m * L);  // padding rows (>= count[b]) stay 0
  const int64_t blocks = (m + HASH_ROWS - 1) / HASH_ROWS;
  // a decode step's queries are a few rows per kv-head, but each kv-head reads its own K*L x d projections
  // (385 KB at K*L = 1500, d = 64): the threads split the kv-heads, and where there are fewer than two per
  // thread (3 kv-heads on 2 threads would leave one thread idle half the time), each kv-head's tables too
  const int64_t row_items = B * Hkv * blocks;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(L, (2 * threads + row_items - 1) / row_items));
  const int64_t items = row_items * chunks;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
#pragma omp parallel num_threads(threads)
  {
    // per-thread scratch (grow) for the rows an item can have (at most HASH_ROWS)
    const int64_t cap = std::min(HASH_ROWS, (m + rb - 1) / rb * rb);
    thread_local std::vector<float> tls_x;
    thread_local std::vector<uint8_t> tls_sign;
    thread_local std::vector<int32_t> tls_codes;
    std::vector<float>& x = tls_x;  // one lookup of the thread's storage, not one per use
    std::vector<uint8_t>& sign = tls_sign;
    std::vector<int32_t>& block_codes = tls_codes;
    grow(x, cap * d);
    grow(sign, rb * KLp);
    grow(block_codes, cap * L);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t row_item = it / chunks, chunk = it % chunks;
      const int64_t bh = row_item / blocks, r0 = (row_item % blocks) * HASH_ROWS, b = bh / Hkv, h = bh % Hkv;
      const int64_t t0 = chunk * L / chunks, t1 = (chunk + 1) * L / chunks;
      const int64_t rows = std::min(HASH_ROWS, count[b] - r0);
      if (rows <= 0) continue;
      const float* c = center + bh * d;
      const float* src = keys + (bh * n + lo[b] + r0) * d;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < d; ++k) x[r * d + k] = src[r * d + k] - c[k];
      const int64_t padded = (rows + rb - 1) / rb * rb;
      std::fill(x.begin() + rows * d, x.begin() + padded * d, 0.f);
      fn(x.data(), padded, rows, d, w0 + (S == 1 ? 0 : h) * d * KLp, KLp, K, L, t0, t1, sign.data(),
         block_codes.data());
      if (table_major) {  // (B, Hkv, L, m): table j of this block is `rows` consecutive codes
        for (int64_t j = t0; j < t1; ++j) {
          int32_t* dst = codes + (bh * L + j) * m + r0;
          for (int64_t r = 0; r < rows; ++r) dst[r] = block_codes[r * L + j];
        }
      } else {
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(codes + (bh * m + r0 + r) * L + t0, block_codes.data() + r * L + t0, sizeof(int32_t) * (t1 - t0));
      }
    }
  }
}

}  // namespace magicpig

