// Shared declarations of the MagicPIG CPU module (no torch types here: the kernels work on raw
// pointers so that the ISA-specific translation units include nothing but the C++ runtime).
//
// Layouts (all row-major, contiguous):
//   codes    (B, Hkv, n_max, L) int32    bucket code of key row i in table j, in [0, 2^K)
//   offsets  (B, Hkv, L, 2^K + 1) int32  CSR bucket boundaries of each table
//   ids      (B, Hkv, L, n_max) uint16 or uint32: token ids of each table grouped by bucket
//   kv       (B, Hkv, n_max, 2, d) float32 or bfloat16: key row then value row of each token, so one
//            token is one contiguous 2*d block (key norms are computed from the row as it is read,
//            rather than from a separate array that would cost one more random cache miss per token)
//   q        (B, H, d) float32; q_codes (B, H, L) int32; bits (B, H, W) uint64, W = ceil(n_max / 64)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace magicpig {

// v grown to at least n elements (never shrunk): the kernels' per-thread scratch arrays, which keep their
// capacity across a decode step's calls instead of allocating on each (on the calling thread's fragmented
// heap that measured about 4% of a 32K step's samples)
template <typename T>
inline void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

enum Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// True when this CPU can run the given variant (the scalar one always can).
bool cpu_supports(int isa);

// Read-only view of one layer's hash tables.
struct Tables {
  int64_t B, Hkv, L, n_max;
  int K;
  int id_bytes;            // 2 (n_max <= 65536) or 4
  const int32_t* offsets;  // (B, Hkv, L, 2^K + 1)
  const void* ids;         // (B, Hkv, L, n_max)
};

// Kernel 1: build tables. Returns false (and leaves the tables partial) if a code is out of range.
// table_major: codes are (B, Hkv, L, n_max) instead of (B, Hkv, n_max, L).
bool build_tables(const int32_t* codes, const int64_t* counts, int64_t B, int64_t Hkv, int64_t n_max,
                  int64_t L, int K, int id_bytes, int32_t* offsets, void* ids, int threads,
                  bool table_major = false);

// Kernel 0: SimHash codes of the decoder's offloaded keys. For sequence b and kv-head h, rows
// lo[b] .. lo[b] + count[b] of keys (B, Hkv, n, d) float32, centred by center (B, Hkv, d), are hashed
// with projections proj (S, P / kHashTile, d, kHashTile): the tiled layout of (S, d, P) matrices, P >= K*L a
// multiple of kHashTile columns of which the first K*L are used (magicpig.cpu.tile_projections), S = Hkv
// (head h uses set h) or 1; row r goes to codes[b, h, r]
// of codes (B, Hkv, m, L) int32, or (B, Hkv, L, m) when table_major (rows >= count[b] are zero). isa:
// the variant to use (falls back to what the CPU supports).
constexpr int64_t kHashTile = 32;  // kernel 0's projection tile: columns per contiguous (d, kHashTile) block
void hash_keys(const float* keys, int64_t B, int64_t Hkv, int64_t n, int64_t d, const float* center,
               const float* proj, int64_t S, int64_t P, int K, int64_t L, const int64_t* lo,
               const int64_t* count, int64_t m, int32_t* codes, bool table_major, int isa, int threads);

// Kernel 2: retrieval. For each (b, h): bit i of bits[b, h] is set iff token i shares the query's
// bucket in >= min_collisions tables of kv-head h / (H / Hkv). sampled[b, h] = number of such tokens;
// entries[b, h] = bucket entries read (sum of the L bucket sizes).
void retrieve(const Tables& t, const int32_t* q_codes, int64_t H, int min_collisions, uint64_t* bits,
              int32_t* sampled, int64_t* entries, int threads);

// Arguments of kernel 3, sparse importance-weighted attention over the retrieved keys.
struct AttendArgs {
  int64_t B, H, Hkv, n_max, d;
  bool bf16;               // keys / values are bfloat16 (else float32)
  const void* kv;          // (B, Hkv, n_max, 2, d)
  const float* q;
  const uint64_t* bits;
  float scale;
  // correction f(c) = -ln(u(c) + 1e-4) tabulated at c = -1 + 2 i / table_n, i = 0..table_n, used for
  // |c| <= table_limit; outside, f is evaluated exactly from (K, L, min_collisions).
  const float* table;
  int table_n;
  float table_limit;
  int K, L, min_collisions;
  int prefetch;            // tokens ahead whose rows are prefetched
  int64_t split_tokens;    // token range of one work item (0: as few items as keep every thread busy)
};

// Partial result of one work item (one kv-head of one sequence, one range of tokens), per query head
// g of the group: part[g * (d + 2) + 0] = max logit m, [1] = sum of exp(logit - m), [2..] = acc.
// ids (sorted) / masks (bit g set: head g of the group sampled the token) list the U union tokens.
using AttendGroupFn = void (*)(const AttendArgs& a, int64_t b, int64_t kvh, const uint32_t* ids,
                               const uint64_t* masks, int64_t U, float* part);

// The token list of one work item: the tokens of words [w0, w1) of the G bitsets bits[g * W + w] that any
// head of the group sampled, in increasing order (ids), and for each the heads that sampled it (masks, bit
// g). ids and masks need room for kListSlack entries past the count (whole vectors are stored). Returns the
// count.
constexpr int64_t kListSlack = 16;
using ListTokensFn = int64_t (*)(const uint64_t* bits, int64_t G, int64_t W, int64_t w0, int64_t w1,
                                 uint32_t* ids, uint64_t* masks);

// Exact correction -ln(u + 1e-4) for one cosine (double-precision binomial tail, as magicpig.lsh).
float exact_correction(float cos, int K, int L, int min_collisions);

// Kernel 3 driver: out (B, H, d) float32, lse (B, H) float32 (natural log; -inf and out = 0 when
// nothing was sampled; NaN and out = NaN for a head whose query holds a NaN or inf, as the torch
// reference gives).
void attend(const AttendArgs& a, int isa, float* out, float* lse, int threads);

// Arguments of kernel 5, exact attention of one decode query per head (the dense layers and the static
// part of the system path): keys / values (B, Hkv, n, d) at the given element strides (batch, head,
// token; the last dim contiguous), float32 or bfloat16; q (B, H, d) float32.
struct ExactArgs {
  int64_t B, H, Hkv, n, d;
  bool bf16;
  const void* k;
  const void* v;
  int64_t k_stride[3], v_stride[3];
  const float* q;
  float scale;
  // optional (out (B, H, d), lse (B, H)) of another, disjoint key set to merge into the result (the
  // system path's sparse CPU part), or null
  const float* prior_out = nullptr;
  const float* prior_lse = nullptr;
};
using ExactRangeFn = void (*)(const ExactArgs& a, int64_t b, int64_t kvh, int64_t t0, int64_t t1, float* part);

// Kernel 8 (prefill.cpp): exact causal attention of a bfloat16 prefill block, query row i at position
// kv - q + i; out (B, q, H, d) float32. Runs only where prefill_supported() (AVX512-BF16).
struct PrefillArgs {
  int64_t B, H, Hkv, q, kv, d;  // d: a multiple of 32, at most 256
  const uint16_t* Q;            // (B, H, q, d) bfloat16, contiguous
  const uint16_t* K;            // (B, Hkv, kv, d)
  const uint16_t* V;            // (B, Hkv, kv, d)
  float scale;
  float* out;                   // (B, q, H, d) float32
};
bool prefill_supported();
void prefill_attend(const PrefillArgs& a, int threads);

// Kernel 5 driver: out (B, H, d) float32, lse (B, H) float32 (natural log; -inf and out = 0 when n = 0
// and there is no prior; NaN for a head whose query holds a NaN or inf), merged with the prior result
// when one is given. Token ranges of a group are split over the threads.
void exact_attend(const ExactArgs& a, int isa, float* out, float* lse, int threads);

// Merge the partial softmax states of the splits of query head bh (parts laid out as kernel 3 / 5 leave
// them: item (group * splits + s), head g of the group at g * (d + 2)) into out[bh] and lse[bh], with the
// finished result (prior_out[bh], prior_lse[bh]) of a disjoint key set when prior_out is not null (a
// result is the partial state max = lse, sum = 1, acc = out).
void merge_parts(const float* parts, int64_t splits, int64_t G, int64_t d, const float* q, int64_t H,
                 int64_t Hkv, int64_t bh, float* out, float* lse, const float* prior_out = nullptr,
                 const float* prior_lse = nullptr);

// Kernel 4: the linear layers of a decode step. y (M, O) = x (M, I) W^T + bias for the few input rows
// of one step (one per sequence), x float32, W (O, I) row-major in one of WeightFormat, bias (O,) float32
// or null; row m of y starts at y + m * ldy (ldy >= O: several layers that share x, such as q/k/v, write
// side by side into one output). Memory-bound: W is read once, the output rows split over the threads in
// contiguous ranges.
//   kWeightF32, kWeightBF16: row o is I values.
//   kWeightQ8: row o is I int8 values q followed by I / kQ8Block float32 scales d (I + 4 I / 32 bytes, I a
//   multiple of kQ8Block); weight [o, i] = d[i / kQ8Block] * q[i] (the Q8_0 rule of GGUF: per block of 32,
//   d = max |w| / 127, q = round(w / d)). The driver quantizes x by the same rule (xq, xd: once per call,
//   shared by all rows) and a block's product is the exact integer sum of q_w q_x times d_w d_x, as
//   llama.cpp's Q8_0 x Q8_0 dot product computes it.
enum WeightFormat : int { kWeightF32 = 0, kWeightBF16 = 1, kWeightQ8 = 2 };
constexpr int64_t kQ8Block = 32;
inline int64_t weight_row_bytes(int format, int64_t I) {
  return format == kWeightQ8 ? I + 4 * (I / kQ8Block) : I * (format == kWeightBF16 ? 2 : 4);
}
struct LinearArgs {
  int64_t M, I, O;
  const float* x;
  const void* W;
  int w_format;  // WeightFormat
  const float* bias;
  float* y;
  int64_t ldy;
  bool accumulate = false;  // y += x W^T + bias (a residual connection) instead of y =
  const int8_t* xq = nullptr;  // kWeightQ8: x quantized (M, I) and its scales (M, I / kQ8Block), by the driver
  const float* xd = nullptr;
};
constexpr int64_t kLinearRows = 16;  // output rows per scheduling unit (a 64-byte line of y per input row)
// parts[0 .. count): layers computed in one parallel region, their rows split over the threads together.
void linear(const LinearArgs* parts, int64_t count, int isa, int threads);

// Kernel 6: the halves of a Llama-family decoder layer's decode step around its attention, for M rows
// (one per sequence) of the hidden state h (M, D) float32. norm / eps: the half's RMSNorm weight (D,).
struct LayerIn {
  int64_t M, D;
  const float* h;
  const float* norm;
  float eps;
  // attention_in only: heads, kv_heads, head_dim; cos / sin (M, head_dim): the rotary embedding of
  // each row's position
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
};
// qkv[0..2] = q, k, v projections of normed = RMSNorm(h) (M, D) scratch, side by side in one output
// (ldy = (heads + 2 kv_heads) head_dim), then the rotary embedding of its q and k heads, in place.
void attention_in(const LayerIn& a, const LinearArgs* qkv, float* normed, int isa, int threads);
// gate_up[0..1] of normed = RMSNorm(h) side by side; act (M, F) = SiLU(gate) * up; then down, which
// reads act and usually accumulates into h (the residual).
void mlp(const LayerIn& a, const LinearArgs* gate_up, LinearArgs& down, float* normed, float* act, int isa,
         int threads);
// The model's output: normed = RMSNorm(h), then the output head, whose input is normed.
void norm_head(const LayerIn& a, const LinearArgs& head, float* normed, int isa, int threads);

// Kernel 7: rows x[b, h, j] - center[b, h] (j < m) written to rows n + j of buf (B, H_kv, cap, d),
// contiguous; x has a contiguous last dim and strides x_stride (elements) for its first three. x and buf
// are float32 or bfloat16 (buf converted with round-to-nearest-even); center (B, H_kv, d) float32 or null.
struct AppendArgs {
  int64_t B, Hkv, m, d, cap, n;
  const void* x;
  int64_t x_stride[3];
  bool x_bf16;
  const float* center;
  void* buf;
  bool buf_bf16;
};
void append_rows(const AppendArgs& a);

// Ask the kernel to back [data, data + nbytes) with transparent huge pages (best effort; call before
// the memory is first touched). Random row gathers over hundreds of MB otherwise miss the TLB each time.
void advise_huge_pages(void* data, int64_t nbytes);

// The bandwidth probes; each returns the xor of the words it read (so the compiler cannot drop the reads).
// Streaming read of nbytes (multiple of 8) with all threads, a plain loop of the baseline flags: on AMD
// EPYC it streamed 10% faster than AVX-512 loads (32.4 against 29.0 GB/s, one process), and the
// bandwidth every ratio divides by should be the most the machine reads.
uint64_t stream_read(const void* data, int64_t nbytes, int threads);

// Random-gather read: the rows data + rows[i] * row_bytes (row_bytes a multiple of 8), i in [0, count),
// split into contiguous chunks over the threads, each row prefetched `prefetch` rows ahead, as the
// attention kernel fetches them but with no arithmetic. What random row reads can reach on this machine:
// read with the widest loads of ISA variant isa (< 0: the best this CPU runs, which the benchmarks use;
// a variant it lacks falls back as the kernels' do).
uint64_t gather_rows(const void* data, int64_t row_bytes, const int64_t* rows, int64_t count, int prefetch,
                     int threads, int isa = -1);

// The entry points of each ISA variant (isa_scalar.cpp, isa_avx2.cpp, isa_avx512.cpp: attend_impl.h,
// linear_impl.h and probe_impl.h compiled for that instruction set). The drivers call a variant only when
// cpu_supports() says this CPU runs it; off x86 the vector variants are scalar's.
#define MP_VARIANT_ENTRY_POINTS                                                                    \
  void attend_group(const AttendArgs&, int64_t, int64_t, const uint32_t*, const uint64_t*, int64_t, \
                    float*);                                                                          \
  int64_t list_tokens(const uint64_t*, int64_t, int64_t, int64_t, int64_t, uint32_t*, uint64_t*);    \
  void exact_range(const ExactArgs&, int64_t, int64_t, int64_t, int64_t, float*);                  \
  void linear_block(const LinearArgs&, int64_t o0, int64_t on);                                     \
  /* x (M, I) -> q (M, I) int8, d (M, I / kQ8Block): the Q8_0 rule per block (d = max |x| / 127, */   \
  /* q = round-half-even(x / d), 0 where d = 0), the same bits in every variant */                  \
  void quantize_q8(const float* x, int64_t M, int64_t I, int8_t* q, float* d);                     \
  void silu_mul(const float* g, const float* u, float* act, int64_t n);                            \
  uint64_t gather_rows(const void*, int64_t, const int64_t*, int64_t, int, int);
namespace scalar { MP_VARIANT_ENTRY_POINTS }
#if defined(__x86_64__) || defined(__i386__)
namespace avx2 { MP_VARIANT_ENTRY_POINTS }
namespace avx512 { MP_VARIANT_ENTRY_POINTS }
#else
namespace avx2 = scalar;
namespace avx512 = scalar;
#endif
#undef MP_VARIANT_ENTRY_POINTS

// The entry point `name` of the variant for isa (an Isa code) that this CPU runs: the AVX-512 or AVX2 one where
// asked for and cpu_supports() it, the scalar one otherwise.
#define MP_VARIANT_FN(isa, name)                                                              \
  ((isa) == kAvx512 && cpu_supports(kAvx512) ? avx512::name                                   \
   : (isa) == kAvx2 && cpu_supports(kAvx2)   ? avx2::name                                     \
                                             : scalar::name)

}  // namespace magicpig
