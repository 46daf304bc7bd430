// Kernel 8: exact causal attention of a prefill block in bfloat16, with AVX512-BF16 dot products
// (VDPBF16PS: pairs of bfloat16 products summed into float32 lanes). Query row i of a block of q rows sits
// at position kv - q + i and attends keys 0 .. kv - q + i. Logits, softmax statistics and the output
// accumulate in float32; the softmax weights are rounded to bfloat16 before they meet the values, as
// torch's own bfloat16 SDPA on the CPU does.
//
// Layout. Per (sequence, kv-head) the keys are repacked into blocks of 16 keys, each block holding, for
// every pair of dimensions (2p, 2p + 1), the 16 keys' two values side by side (one 64-byte vector per
// pair); the values into pairs of consecutive keys, each pair holding, per dimension, the two keys' values
// side by side. A work item is 16 query rows of one head: pass 1 writes their float32 logits over every
// visible key block (8 rows x 2 key blocks at a time, lanes = 16 keys), pass 2 turns each row into bfloat16
// weights exp(logit - max) and their float32 sum, pass 3 accumulates weights x values (lanes = 16
// dimensions, 4 vectors x 4 rows at a time) and divides by the sum. Each inner step loads a few vectors
// for 16 dot-product instructions. Items run largest first (the causal triangle), dynamically scheduled.
//
// The kernel is compiled for AVX512-BF16 alone and runs only where ``prefill_supported()`` says the CPU
// has it; its binding is in bindings.cpp.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "magicpig_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MP_PREFILL_X86 1
#endif

namespace magicpig {
namespace {

constexpr int64_t kRows = 16;  // query rows per work item
constexpr int64_t kKeys = 16;  // keys per packed key block (one float32 vector of logits)

// Keys of one (sequence, kv-head) into blocks [kb][d / 2][16 keys][2]; keys past kv are zero.
void pack_keys(const uint16_t* k, int64_t kv, int64_t d, int64_t blocks, uint16_t* kp) {
  std::memset(kp, 0, sizeof(uint16_t) * blocks * kKeys * d);
  for (int64_t j = 0; j < kv; ++j) {
    uint16_t* blk = kp + (j / kKeys) * kKeys * d + (j % kKeys) * 2;
    for (int64_t p = 0; p < d / 2; ++p) {
      blk[p * 2 * kKeys] = k[j * d + 2 * p];
      blk[p * 2 * kKeys + 1] = k[j * d + 2 * p + 1];
    }
  }
}

// Values of one (sequence, kv-head) into key pairs [pair][d][2]; keys past kv are zero.
void pack_values(const uint16_t* v, int64_t kv, int64_t d, int64_t pairs, uint16_t* vp) {
  std::memset(vp, 0, sizeof(uint16_t) * pairs * 2 * d);
  for (int64_t j = 0; j < kv; ++j) {
    uint16_t* dst = vp + (j / 2) * 2 * d + (j % 2);
    const uint16_t* src = v + j * d;
    for (int64_t c = 0; c < d; ++c) dst[2 * c] = src[c];
  }
}

#if defined(MP_PREFILL_X86)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,fma")

// exp(x) for x <= 0 (a logit minus its row's maximum): 2^k * p(r), x = k ln2 + r, degree-6 polynomial;
// x below -87 (and -inf, a masked key) gives 0.
inline __m512 exp512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  __m512 v = _mm512_max_ps(x, lo);
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), v);
  v = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), v);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.38888889e-3f), v, _mm512_set1_ps(8.33333333e-3f));
  p = _mm512_fmadd_ps(p, v, _mm512_set1_ps(4.16666667e-2f));
  p = _mm512_fmadd_ps(p, v, _mm512_set1_ps(1.66666667e-1f));
  p = _mm512_fmadd_ps(p, v, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, v, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, v, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
}

inline __m512bh pair_bcast(const uint16_t* pair) {
  int32_t bits;
  std::memcpy(&bits, pair, sizeof(bits));
  return (__m512bh)_mm512_set1_epi32(bits);
}

// Pass 3 of an item for dimensions c .. c + 16 NV: out_rows[r] = sum_j weights[r][j] v_j / sums[r], NV
// vectors of 16 dimensions for 16 / NV rows at a time (16 accumulators; rows past nr are not written).
template <int NV>
inline void weigh_values(const PrefillArgs& a, const uint16_t* weights, int64_t stride, const uint16_t* vp,
                         int64_t pairs, int64_t c, int64_t nr, const float* sums, float* out_rows) {
  constexpr int64_t RG = kRows / NV;
  const int64_t d = a.d;
  for (int64_t g = 0; g < nr; g += RG) {
    __m512 acc[RG][NV];
#pragma GCC unroll 16
    for (int64_t r = 0; r < RG; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int64_t jp = 0; jp < pairs; ++jp) {
      __m512bh vv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) vv[v] = (__m512bh)_mm512_loadu_si512(vp + (jp * d + c + 16 * v) * 2);
#pragma GCC unroll 16
      for (int64_t r = 0; r < RG; ++r) {
        const __m512bh w = pair_bcast(weights + (g + r) * stride + 2 * jp);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], w, vv[v]);
      }
    }
    for (int64_t r = 0; r < RG && g + r < nr; ++r)
      for (int v = 0; v < NV; ++v)
        _mm512_storeu_ps(out_rows + (g + r) * a.H * d + c + 16 * v,
                         _mm512_mul_ps(acc[r][v], _mm512_set1_ps(1.0f / sums[g + r])));
  }
}

// One work item: rows r0 .. r0 + nr of query head h (its rows at q_rows, stride d), over the packed keys
// kp and values vp of its kv-head. logits: kRows x stride floats; weights: kRows x stride bfloat16.
void attend_rows(const PrefillArgs& a, const uint16_t* q_rows, int64_t r0, int64_t nr, const uint16_t* kp,
                 const uint16_t* vp, float* logits, uint16_t* weights, int64_t stride, float* out_rows) {
  const int64_t d = a.d, offset = a.kv - a.q;
  const int64_t visible = offset + r0 + nr;  // keys seen by the item's last row
  const int64_t blocks = (visible + kKeys - 1) / kKeys;
  const uint16_t* rows[kRows];
  for (int64_t r = 0; r < kRows; ++r) rows[r] = q_rows + std::min(r, nr - 1) * d;
  __m512 row_max[kRows];
  for (int64_t r = 0; r < kRows; ++r) row_max[r] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 scale = _mm512_set1_ps(a.scale);
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  // pass 1: logits, two key blocks x 8 rows at a time (16 accumulators)
  for (int64_t kb = 0; kb < blocks; kb += 2) {
    const bool two = kb + 1 < blocks;
    const uint16_t* blk0 = kp + kb * kKeys * d;
    const uint16_t* blk1 = two ? blk0 + kKeys * d : blk0;
    for (int64_t half = 0; half < kRows; half += 8) {
      __m512 acc0[8], acc1[8];
#pragma GCC unroll 8
      for (int64_t r = 0; r < 8; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
      for (int64_t p = 0; p < d / 2; ++p) {
        const __m512bh k0 = (__m512bh)_mm512_loadu_si512(blk0 + p * 2 * kKeys);
        const __m512bh k1 = (__m512bh)_mm512_loadu_si512(blk1 + p * 2 * kKeys);
#pragma GCC unroll 8
        for (int64_t r = 0; r < 8; ++r) {
          const __m512bh qq = pair_bcast(rows[half + r] + 2 * p);
          acc0[r] = _mm512_dpbf16_ps(acc0[r], qq, k0);
          acc1[r] = _mm512_dpbf16_ps(acc1[r], qq, k1);
        }
      }
      for (int64_t r = 0; r < 8 && half + r < nr; ++r) {
        const int64_t row = half + r;
        const __m512i lim = _mm512_set1_epi32(static_cast<int32_t>(offset + r0 + row));
        for (int64_t b = 0; b < (two ? 2 : 1); ++b) {
          const __m512i key = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>((kb + b) * kKeys)));
          const __mmask16 seen = _mm512_cmple_epi32_mask(key, lim);
          const __m512 x = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), seen,
                                              _mm512_mul_ps(b ? acc1[r] : acc0[r], scale));
          row_max[row] = _mm512_max_ps(row_max[row], x);
          _mm512_storeu_ps(logits + row * stride + (kb + b) * kKeys, x);
        }
      }
    }
  }
  // pass 2: bfloat16 weights and their float32 sums
  float sums[kRows];
  for (int64_t r = 0; r < nr; ++r) {
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(row_max[r]));
    __m512 s = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const __m512 w = exp512(_mm512_sub_ps(_mm512_loadu_ps(logits + r * stride + kb * kKeys), m));
      s = _mm512_add_ps(s, w);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(weights + r * stride + kb * kKeys),
                          (__m256i)_mm512_cvtneps_pbh(w));
    }
    sums[r] = _mm512_reduce_add_ps(s);
  }
  for (int64_t r = nr; r < kRows; ++r)  // rows past the item's end read row nr - 1's weights
    std::memcpy(weights + r * stride, weights + (nr - 1) * stride, sizeof(uint16_t) * blocks * kKeys);
  // pass 3: weights x values, NV vectors of 16 dimensions x 16 / NV rows at a time (16 accumulators)
  const int64_t pairs = blocks * kKeys / 2;
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) weigh_values<4>(a, weights, stride, vp, pairs, c, nr, sums, out_rows);
  if (c < d) weigh_values<2>(a, weights, stride, vp, pairs, c, nr, sums, out_rows);
}

#pragma GCC pop_options
#endif

}  // namespace

void prefill_attend(const PrefillArgs& a, int threads) {
#if defined(MP_PREFILL_X86)
  const int64_t d = a.d, G = a.H / a.Hkv, kblocks = (a.kv + kKeys - 1) / kKeys, pairs = kblocks * kKeys / 2;
  const int64_t groups = a.B * a.Hkv, kp_size = kblocks * kKeys * d, vp_size = pairs * 2 * d;
  std::vector<uint16_t> kp(static_cast<size_t>(groups * kp_size)), vp(static_cast<size_t>(groups * vp_size));
  const int64_t row_blocks = (a.q + kRows - 1) / kRows, items = a.B * a.H * row_blocks;
  const int64_t stride = kblocks * kKeys;
  const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, std::max(groups, items))));
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      pack_keys(a.K + g * a.kv * d, a.kv, d, kblocks, kp.data() + g * kp_size);
      pack_values(a.V + g * a.kv * d, a.kv, d, pairs, vp.data() + g * vp_size);
    }
    std::vector<float> logits(static_cast<size_t>(kRows * stride));
    std::vector<uint16_t> weights(static_cast<size_t>(kRows * stride));
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t rb = row_blocks - 1 - it / (a.B * a.H), bh = it % (a.B * a.H);  // longest rows first
      const int64_t b = bh / a.H, h = bh % a.H, g = b * a.Hkv + h / G, r0 = rb * kRows;
      const int64_t nr = std::min(kRows, a.q - r0);
      attend_rows(a, a.Q + (bh * a.q + r0) * d, r0, nr, kp.data() + g * kp_size, vp.data() + g * vp_size,
                  logits.data(), weights.data(), stride, a.out + ((b * a.q + r0) * a.H + h) * d);
    }
  }
#else
  (void)a;
  (void)threads;
#endif
}

bool prefill_supported() {
#if defined(MP_PREFILL_X86)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace magicpig
