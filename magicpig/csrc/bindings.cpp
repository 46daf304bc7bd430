// Python bindings of the MagicPIG CPU module (torch C++ extension). Checks shapes / dtypes, naming the
// bad argument, then calls the raw-pointer kernels. The only translation unit that includes torch; the
// bindings of kernels 4 and 6 are in bindings_layer.h, the decode loop's in bindings_loop.h, included here.
#include <torch/extension.h>

#include <chrono>

#include "bindings_checks.h"
#include "bindings_layer.h"
#include "magicpig_cpu.h"

namespace {

using magicpig::AttendArgs;
using magicpig::check_cpu_contig;
using magicpig::check_dtype;
using magicpig::Tables;

// An uninitialised CPU tensor whose memory starts on a 2 MiB boundary and is advised to be backed by
// transparent huge pages (before the first touch). The kernels read such tensors at random places;
// with 4 KiB pages nearly every read would also miss the TLB, and a prefetch that misses the TLB may
// be dropped. Tensors under 1 MiB are plain allocations. The view keeps its padded storage alive.
torch::Tensor empty_huge(std::vector<int64_t> sizes, torch::ScalarType dtype) {
  constexpr int64_t kHuge = int64_t(1) << 21;
  int64_t numel = 1;
  for (int64_t s : sizes) {
    TORCH_CHECK(s >= 0, "empty_huge: negative size");
    numel *= s;
  }
  const int64_t nbytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  if (nbytes < kHuge / 2) return torch::empty(sizes, dtype);
  const int64_t span = (nbytes + kHuge - 1) / kHuge * kHuge;
  auto raw = torch::empty({span + kHuge}, torch::kUInt8);
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw.data_ptr());
  const uintptr_t aligned = (start + kHuge - 1) & ~static_cast<uintptr_t>(kHuge - 1);
  magicpig::advise_huge_pages(reinterpret_cast<void*>(aligned), span);
  return raw.narrow(0, static_cast<int64_t>(aligned - start), nbytes).view(dtype).view(sizes);
}

// codes (B, Hkv, n_max, L) int32, counts (B,) int64 -> (offsets (B, Hkv, L, 2^K + 1) int32,
// ids (B, Hkv, L, n_max) int16 (read as uint16) when n_max <= 65536 else int32)
std::vector<torch::Tensor> build_tables_impl(torch::Tensor codes, torch::Tensor counts, int64_t K,
                                             int64_t threads, bool table_major) {
  check_cpu_contig(codes, "codes");
  check_cpu_contig(counts, "counts");
  check_dtype(codes, torch::kInt32, "codes");
  check_dtype(counts, torch::kInt64, "counts");
  TORCH_CHECK(codes.dim() == 4,
              table_major ? "codes must be (B, H_kv, L, n_max)" : "codes must be (B, H_kv, n_max, L)");
  TORCH_CHECK(K >= 1 && K <= 16, "K must be in [1, 16], got ", K);
  const int64_t B = codes.size(0), Hkv = codes.size(1);
  const int64_t n_max = codes.size(table_major ? 3 : 2), L = codes.size(table_major ? 2 : 3);
  TORCH_CHECK(counts.dim() == 1 && counts.size(0) == B, "counts must be (B,) with B = ", B);
  TORCH_CHECK(n_max <= (int64_t(1) << 32), "n_max too large for 32-bit ids: ", n_max);
  const int id_bytes = n_max <= 65536 ? 2 : 4;
  auto offsets = empty_huge({B, Hkv, L, (int64_t(1) << K) + 1}, torch::kInt32);
  auto ids = empty_huge({B, Hkv, L, n_max}, id_bytes == 2 ? torch::kInt16 : torch::kInt32);
  const bool ok = magicpig::build_tables(codes.data_ptr<int32_t>(), counts.data_ptr<int64_t>(), B, Hkv, n_max,
                                         L, static_cast<int>(K), id_bytes, offsets.data_ptr<int32_t>(),
                                         ids.data_ptr(), static_cast<int>(threads), table_major);
  TORCH_CHECK(ok, "codes must lie in [0, 2^K) = [0, ", int64_t(1) << K, ")");
  return {offsets, ids};
}

// codes (B, Hkv, n_max, L) int32, counts (B,) int64 -> (offsets (B, Hkv, L, 2^K + 1) int32,
// ids (B, Hkv, L, n_max) int16 (read as uint16) when n_max <= 65536 else int32)
std::vector<torch::Tensor> build_tables(torch::Tensor codes, torch::Tensor counts, int64_t K, int64_t threads) {
  return build_tables_impl(codes, counts, K, threads, false);
}

// the same from table-major codes (B, Hkv, L, n_max)
std::vector<torch::Tensor> build_tables_table_major(torch::Tensor codes, torch::Tensor counts, int64_t K,
                                                    int64_t threads) {
  return build_tables_impl(codes, counts, K, threads, true);
}

// Kernel 0's projections: (S, P / T, d, T) contiguous with T = kHashTile, S = Hkv or 1, P >= KL
// (cpu.tile_projections)
static void check_tiled_projections(const torch::Tensor& proj, int64_t Hkv, int64_t d, int64_t KL) {
  constexpr int64_t T = magicpig::kHashTile;
  check_cpu_contig(proj, "proj");
  TORCH_CHECK(proj.dim() == 4 && (proj.size(0) == Hkv || proj.size(0) == 1) && proj.size(2) == d &&
                  proj.size(3) == T && proj.size(1) * T >= KL,
              "proj must be tiled (H_kv or 1, P / ", T, ", d, ", T, ") with P >= K*L: (", Hkv, " or 1, >= ",
              (KL + T - 1) / T, ", ", d, ", ", T, "), got ", proj.sizes(), " (magicpig.cpu.tile_projections makes it)");
}

// keys (B, Hkv, n, d) float32, center (B, Hkv, d) float32, proj (S, P / 32, d, 32) float32, tiled (S = Hkv
// or 1),
// lo / count (B,) int64 row ranges -> codes (B, Hkv, m, L) int32 of the centred rows, or (B, Hkv, L, m)
// when table_major (kernel 0)
torch::Tensor hash_keys(torch::Tensor keys, torch::Tensor center, torch::Tensor proj, torch::Tensor lo,
                        torch::Tensor count, int64_t m, int64_t K, int64_t L, bool table_major, int64_t isa,
                        int64_t threads) {
  for (auto* t : {&keys, &center, &proj}) check_dtype(*t, torch::kFloat32, "keys, center and proj");
  check_cpu_contig(keys, "keys");
  check_cpu_contig(center, "center");
  check_cpu_contig(lo, "lo");
  check_cpu_contig(count, "count");
  check_dtype(lo, torch::kInt64, "lo");
  check_dtype(count, torch::kInt64, "count");
  TORCH_CHECK(keys.dim() == 4, "keys must be (B, H_kv, n, d)");
  const int64_t B = keys.size(0), Hkv = keys.size(1), n = keys.size(2), d = keys.size(3);
  TORCH_CHECK(K >= 1 && K <= 16 && L >= 1, "K must be in [1, 16] and L >= 1, got K = ", K, ", L = ", L);
  TORCH_CHECK(center.dim() == 3 && center.size(0) == B && center.size(1) == Hkv && center.size(2) == d,
              "center must be (B, H_kv, d) = (", B, ", ", Hkv, ", ", d, ")");
  check_tiled_projections(proj, Hkv, d, K * L);
  TORCH_CHECK(lo.dim() == 1 && lo.size(0) == B && count.dim() == 1 && count.size(0) == B,
              "lo and count must be (B,) with B = ", B);
  TORCH_CHECK(m >= 0, "m must be >= 0");
  const int64_t* l = lo.data_ptr<int64_t>();
  const int64_t* c = count.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    TORCH_CHECK(c[b] >= 0 && c[b] <= m && l[b] >= 0 && l[b] + c[b] <= n, "row range [lo, lo + count) of sequence ",
                b, " must lie in [0, n = ", n, ") with count <= m = ", m);
  auto codes = table_major ? torch::empty({B, Hkv, L, m}, torch::kInt32)
                           : torch::empty({B, Hkv, m, L}, torch::kInt32);
  magicpig::hash_keys(keys.data_ptr<float>(), B, Hkv, n, d, center.data_ptr<float>(), proj.data_ptr<float>(),
                      proj.size(0), proj.size(1) * proj.size(3), static_cast<int>(K), L, l, c, m,
                      codes.data_ptr<int32_t>(), table_major, static_cast<int>(isa), static_cast<int>(threads));
  return codes;
}

Tables tables_view(const torch::Tensor& offsets, const torch::Tensor& ids, int64_t K) {
  check_cpu_contig(offsets, "offsets");
  check_cpu_contig(ids, "ids");
  check_dtype(offsets, torch::kInt32, "offsets");
  TORCH_CHECK(ids.scalar_type() == torch::kInt16 || ids.scalar_type() == torch::kInt32, "ids must be int16 or int32");
  TORCH_CHECK(offsets.dim() == 4 && ids.dim() == 4 && offsets.size(3) == (int64_t(1) << K) + 1 &&
                  offsets.sizes().slice(0, 3) == ids.sizes().slice(0, 3),
              "offsets (B, H_kv, L, 2^K + 1) and ids (B, H_kv, L, n_max) do not agree with K = ", K);
  Tables t;
  t.B = ids.size(0);
  t.Hkv = ids.size(1);
  t.L = ids.size(2);
  t.n_max = ids.size(3);
  t.K = static_cast<int>(K);
  t.id_bytes = ids.scalar_type() == torch::kInt16 ? 2 : 4;
  t.offsets = offsets.data_ptr<int32_t>();
  t.ids = ids.data_ptr();
  return t;
}

// -> (bits (B, H, W) int64 bitsets, sampled (B, H) int32, entries (B, H) int64)
std::vector<torch::Tensor> retrieve(torch::Tensor offsets, torch::Tensor ids, int64_t K, torch::Tensor q_codes,
                                    int64_t min_collisions, int64_t threads) {
  const Tables t = tables_view(offsets, ids, K);
  check_cpu_contig(q_codes, "q_codes");
  check_dtype(q_codes, torch::kInt32, "q_codes");
  TORCH_CHECK(q_codes.dim() == 3 && q_codes.size(0) == t.B && q_codes.size(2) == t.L,
              "q_codes must be (B, H, L) = (", t.B, ", H, ", t.L, ")");
  const int64_t H = q_codes.size(1);
  TORCH_CHECK(H % t.Hkv == 0, "query heads H = ", H, " is not a multiple of kv heads ", t.Hkv);
  TORCH_CHECK(min_collisions >= 1 && min_collisions <= std::min<int64_t>(t.L, 255),
              "min_collisions must be in [1, min(L, 255)], got ", min_collisions);
  if (q_codes.numel() > 0) {
    TORCH_CHECK(q_codes.min().item<int32_t>() >= 0 && q_codes.max().item<int32_t>() < (int64_t(1) << K),
                "q_codes must lie in [0, 2^K)");
  }
  const int64_t W = (t.n_max + 63) / 64;
  auto bits = torch::empty({t.B, H, W}, torch::kInt64);
  auto sampled = torch::empty({t.B, H}, torch::kInt32);
  auto entries = torch::empty({t.B, H}, torch::kInt64);
  magicpig::retrieve(t, q_codes.data_ptr<int32_t>(), H, static_cast<int>(min_collisions),
                     reinterpret_cast<uint64_t*>(bits.data_ptr<int64_t>()), sampled.data_ptr<int32_t>(),
                     entries.data_ptr<int64_t>(), static_cast<int>(threads));
  return {bits, sampled, entries};
}

// kernel 3's arguments, checked: kv (B, H_kv, n_max, 2, d), q (B, H, d) float32. a.bits, the (B, H, W)
// retrieval bitsets, is the caller's to set: attend's checked tensor, or decode_step's scratch.
AttendArgs attend_args(const torch::Tensor& kv, const torch::Tensor& q, double scale, const torch::Tensor& table,
                       double table_limit, int64_t K, int64_t L, int64_t min_collisions, int64_t prefetch,
                       int64_t split_tokens) {
  check_cpu_contig(kv, "kv");
  check_cpu_contig(q, "q");
  check_cpu_contig(table, "table");
  TORCH_CHECK(kv.scalar_type() == torch::kFloat32 || kv.scalar_type() == torch::kBFloat16,
              "kv must be float32 or bfloat16");
  check_dtype(q, torch::kFloat32, "q");
  check_dtype(table, torch::kFloat32, "table");
  TORCH_CHECK(kv.dim() == 5 && kv.size(3) == 2, "kv must be (B, H_kv, n_max, 2, d)");
  const int64_t B = kv.size(0), Hkv = kv.size(1), n_max = kv.size(2), d = kv.size(4);
  TORCH_CHECK(q.dim() == 3 && q.size(0) == B && q.size(2) == d, "q must be (B, H, d) = (", B, ", H, ", d, ")");
  const int64_t H = q.size(1);
  TORCH_CHECK(H % Hkv == 0 && H / Hkv <= 64, "H / H_kv must be an integer <= 64, got H = ", H, ", H_kv = ", Hkv);
  TORCH_CHECK(table.dim() == 1 && table.size(0) >= 2, "table must be 1-D with >= 2 entries");
  AttendArgs a;
  a.B = B;
  a.H = H;
  a.Hkv = Hkv;
  a.n_max = n_max;
  a.d = d;
  a.bf16 = kv.scalar_type() == torch::kBFloat16;
  a.kv = kv.data_ptr();
  a.q = q.data_ptr<float>();
  a.bits = nullptr;
  a.scale = static_cast<float>(scale);
  a.table = table.data_ptr<float>();
  a.table_n = static_cast<int>(table.size(0) - 1);
  a.table_limit = static_cast<float>(table_limit);
  a.K = static_cast<int>(K);
  a.L = static_cast<int>(L);
  a.min_collisions = static_cast<int>(min_collisions);
  a.prefetch = static_cast<int>(std::max<int64_t>(prefetch, 0));
  a.split_tokens = std::max<int64_t>(split_tokens, 0);
  return a;
}

// -> (out (B, H, d) float32, lse (B, H) float32)
std::vector<torch::Tensor> attend(torch::Tensor kv, torch::Tensor q,
                                  torch::Tensor bits, double scale, torch::Tensor table, double table_limit,
                                  int64_t K, int64_t L, int64_t min_collisions, int64_t isa, int64_t threads,
                                  int64_t prefetch, int64_t split_tokens) {
  AttendArgs a = attend_args(kv, q, scale, table, table_limit, K, L, min_collisions, prefetch, split_tokens);
  check_cpu_contig(bits, "bits");
  check_dtype(bits, torch::kInt64, "bits");
  TORCH_CHECK(bits.dim() == 3 && bits.size(0) == a.B && bits.size(1) == a.H && bits.size(2) == (a.n_max + 63) / 64,
              "bits must be (B, H, ceil(n_max / 64))");
  a.bits = reinterpret_cast<const uint64_t*>(bits.data_ptr<int64_t>());
  auto out = torch::empty({a.B, a.H, a.d}, torch::kFloat32);
  auto lse = torch::empty({a.B, a.H}, torch::kFloat32);
  magicpig::attend(a, static_cast<int>(isa), out.data_ptr<float>(), lse.data_ptr<float>(), static_cast<int>(threads));
  return {out, lse};
}

torch::Tensor exact_correction(torch::Tensor cos, int64_t K, int64_t L, int64_t min_collisions) {
  check_cpu_contig(cos, "cos");
  check_dtype(cos, torch::kFloat32, "cos");
  auto out = torch::empty_like(cos);
  const float* c = cos.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < cos.numel(); ++i)
    o[i] = magicpig::exact_correction(c[i], static_cast<int>(K), static_cast<int>(L), static_cast<int>(min_collisions));
  return out;
}

// kernel 5's arguments, checked: q (B, H, d) float32, k / v (B, H_kv, n, d) float32 or bfloat16 (any
// strides, last dim contiguous)
magicpig::ExactArgs exact_args(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
  check_cpu_contig(q, "q");
  check_dtype(q, torch::kFloat32, "q");
  TORCH_CHECK(k.device().is_cpu() && v.device().is_cpu(), "k and v must be CPU tensors");
  TORCH_CHECK(k.scalar_type() == v.scalar_type() &&
                  (k.scalar_type() == torch::kFloat32 || k.scalar_type() == torch::kBFloat16),
              "k and v must both be float32 or both bfloat16");
  TORCH_CHECK(k.dim() == 4 && v.sizes() == k.sizes() && k.stride(3) == 1 && v.stride(3) == 1,
              "k and v must be (B, H_kv, n, d) with the same shape and a contiguous last dim");
  const int64_t B = k.size(0), Hkv = k.size(1), n = k.size(2), d = k.size(3);
  TORCH_CHECK(q.dim() == 3 && q.size(0) == B && q.size(2) == d, "q must be (B, H, d) = (", B, ", H, ", d, ")");
  const int64_t H = q.size(1);
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0 && H / Hkv <= 64, "H / H_kv must be an integer <= 64, got H = ", H,
              ", H_kv = ", Hkv);
  return magicpig::ExactArgs{B, H, Hkv, n, d, k.scalar_type() == torch::kBFloat16, k.data_ptr(), v.data_ptr(),
                             {k.stride(0), k.stride(1), k.stride(2)}, {v.stride(0), v.stride(1), v.stride(2)},
                             q.data_ptr<float>(), static_cast<float>(scale)};
}

// -> (out (B, H, d) float32, lse (B, H) float32); optionally merged with (prior_out (B, H, d), prior_lse
// (B, H)) float32 of a disjoint key set
std::vector<torch::Tensor> exact_attend(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale, int64_t isa,
                                        int64_t threads, c10::optional<torch::Tensor> prior_out,
                                        c10::optional<torch::Tensor> prior_lse) {
  magicpig::ExactArgs a = exact_args(q, k, v, scale);
  TORCH_CHECK(prior_out.has_value() == prior_lse.has_value(), "give both prior_out and prior_lse, or neither");
  if (prior_out.has_value()) {
    check_cpu_contig(*prior_out, "prior_out");
    check_cpu_contig(*prior_lse, "prior_lse");
    check_dtype(*prior_out, torch::kFloat32, "prior_out");
    check_dtype(*prior_lse, torch::kFloat32, "prior_lse");
    TORCH_CHECK(prior_out->sizes() == q.sizes() && prior_lse->dim() == 2 && prior_lse->size(0) == a.B &&
                    prior_lse->size(1) == a.H,
                "prior_out must be (B, H, d) and prior_lse (B, H), as q");
    a.prior_out = prior_out->data_ptr<float>();
    a.prior_lse = prior_lse->data_ptr<float>();
  }
  auto out = torch::empty({a.B, a.H, a.d}, torch::kFloat32);
  auto lse = torch::empty({a.B, a.H}, torch::kFloat32);
  magicpig::exact_attend(a, static_cast<int>(isa), out.data_ptr<float>(), lse.data_ptr<float>(),
                         static_cast<int>(threads));
  return {out, lse};
}

// Kernel 7, for both buffers of a decoder: k - center (center: None for none) and v written to rows n ..
// n + m of k_buf / v_buf (B, H_kv, cap, d) contiguous float32 or bfloat16; k, v (B, H_kv, m, d) float32 or
// bfloat16 with a contiguous last dim.
void append_kv(torch::Tensor k_buf, torch::Tensor v_buf, int64_t n, torch::Tensor k, torch::Tensor v,
               c10::optional<torch::Tensor> center) {
  for (const auto* t : {&k_buf, &v_buf}) {
    check_cpu_contig(*t, "k_buf / v_buf");
    TORCH_CHECK(t->dim() == 4 && (t->scalar_type() == torch::kFloat32 || t->scalar_type() == torch::kBFloat16),
                "k_buf and v_buf must be (B, H_kv, cap, d) float32 or bfloat16, got ", t->sizes(), " ",
                c10::toString(t->scalar_type()));
  }
  TORCH_CHECK(v_buf.sizes() == k_buf.sizes(), "k_buf and v_buf must have the same shape");
  const int64_t B = k_buf.size(0), Hkv = k_buf.size(1), cap = k_buf.size(2), d = k_buf.size(3);
  for (const auto* t : {&k, &v}) {
    TORCH_CHECK(t->device().is_cpu() && t->dim() == 4 && t->size(0) == B && t->size(1) == Hkv && t->size(3) == d &&
                    t->stride(3) == 1 && t->sizes() == k.sizes(),
                "k and v must be CPU (B, H_kv, m, d) = (", B, ", ", Hkv, ", m, ", d,
                ") with a contiguous last dim, got ", t->sizes());
    TORCH_CHECK(t->scalar_type() == torch::kFloat32 || t->scalar_type() == torch::kBFloat16,
                "k and v must be float32 or bfloat16");
  }
  const int64_t m = k.size(2);
  TORCH_CHECK(n >= 0 && n + m <= cap, "rows ", n, " .. ", n + m, " do not fit in a buffer of ", cap);
  const float* c = nullptr;
  if (center.has_value()) {
    check_cpu_contig(*center, "center");
    check_dtype(*center, torch::kFloat32, "center");
    TORCH_CHECK(center->dim() == 3 && center->size(0) == B && center->size(1) == Hkv && center->size(2) == d,
                "center must be (B, H_kv, d)");
    c = center->data_ptr<float>();
  }
  const torch::Tensor* src[2] = {&k, &v};
  torch::Tensor* dst[2] = {&k_buf, &v_buf};
  for (int p = 0; p < 2; ++p) {
    const auto& x = *src[p];
    magicpig::append_rows(magicpig::AppendArgs{B, Hkv, m, d, cap, n, x.data_ptr(), {x.stride(0), x.stride(1), x.stride(2)},
                                               x.scalar_type() == torch::kBFloat16, p == 0 ? c : nullptr,
                                               dst[p]->data_ptr(), dst[p]->scalar_type() == torch::kBFloat16});
  }
}

// decode_step's intermediate arrays, grown to the largest step seen and reused (one per calling thread)
struct StepScratch {
  std::vector<uint64_t> bits;                 // (B, H, W) retrieval bitsets
  std::vector<int32_t> codes, sampled;        // (B, H, L) query codes; (B, H) sampled counts
  std::vector<int64_t> entries, lo, count;    // (B, H) bucket entries read; the hashing's row ranges (B,)
  std::vector<float> zero, part_out, part_lse;  // (B, H_kv, d) zero centre; the sampled part (B, H, d), (B, H)

  void fit(int64_t B, int64_t H, int64_t W, int64_t L, int64_t Hkv, int64_t d, int64_t G) {
    magicpig::grow(bits, B * H * W);
    magicpig::grow(codes, B * H * L);
    magicpig::grow(sampled, B * H);
    magicpig::grow(entries, B * H);
    magicpig::grow(zero, B * Hkv * d);  // only ever zeros: grown with zeros, never written
    magicpig::grow(part_out, B * H * d);
    magicpig::grow(part_lse, B * H);
    lo.assign(static_cast<size_t>(B), 0);
    count.assign(static_cast<size_t>(B), G);
  }
};

// The sampled part's plan of an offloaded layer, checked: its tables, kernel 3's arguments for queries q
// (B, H, d) float32 and kernel 0's tiled projections proj.
struct SparsePlan {
  Tables t;
  AttendArgs a;
  const float* proj;
  int64_t proj_s, proj_p;
};

SparsePlan sparse_plan(const torch::Tensor& kv, const torch::Tensor& offsets, const torch::Tensor& ids, int64_t K,
                       const torch::Tensor& proj, const torch::Tensor& q, double scale, const torch::Tensor& table,
                       double table_limit, int64_t L, int64_t min_collisions, int64_t prefetch,
                       int64_t split_tokens) {
  const Tables t = tables_view(offsets, ids, K);
  check_dtype(proj, torch::kFloat32, "proj");
  TORCH_CHECK(t.L == L && min_collisions >= 1 && min_collisions <= std::min<int64_t>(L, 255),
              "L must match the tables and min_collisions lie in [1, min(L, 255)]");
  AttendArgs a = attend_args(kv, q, scale, table, table_limit, K, L, min_collisions, prefetch, split_tokens);
  TORCH_CHECK(a.B == t.B && a.Hkv == t.Hkv && a.n_max == t.n_max, "kv does not agree with the tables");
  check_tiled_projections(proj, t.Hkv, a.d, K * L);
  return {t, a, proj.data_ptr<float>(), proj.size(0), proj.size(1) * proj.size(3)};
}

// The sampled part and the static part of one decode step of an offloaded layer, its arguments checked: kernel 0
// hashes the queries q (B, H, d) with the plan's tiled projections, kernel 2 retrieves, kernel 3 attends the
// sampled offloaded keys, then kernel 5 attends e's static rows (none when e.n = 0; e's queries are q) and
// merges the two into out (B, H, d) / lse (B, H). sampled (B, H): the sampled counts;
// seconds[0..3] += the four parts' seconds (hash, retrieve, attend, exact). The intermediate arrays live in
// the calling thread's scratch, reused by its later steps (the heap's allocations cost microseconds each on a
// decode step's cold caches).
void sparse_step(const SparsePlan& s, const float* q, magicpig::ExactArgs e, int isa, int threads, float* out,
                 float* lse, float* sampled, double* seconds) {
  auto timer = std::chrono::steady_clock::now();
  auto lap = [&timer]() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - timer).count();
    timer = now;
    return s;
  };
  const Tables& t = s.t;
  AttendArgs a = s.a;
  const int64_t H = a.H, G = H / t.Hkv, W = (t.n_max + 63) / 64;
  thread_local StepScratch scratch;
  scratch.fit(t.B, H, W, a.L, t.Hkv, a.d, G);
  a.q = q;
  a.bits = scratch.bits.data();
  // kernel 0 on the queries: (B, H_kv, G, d) rows, no centre
  magicpig::hash_keys(q, t.B, t.Hkv, G, a.d, scratch.zero.data(), s.proj, s.proj_s, s.proj_p, a.K, a.L,
                      scratch.lo.data(), scratch.count.data(), G, scratch.codes.data(), false, isa, threads);
  seconds[0] += lap();
  magicpig::retrieve(t, scratch.codes.data(), H, a.min_collisions, scratch.bits.data(), scratch.sampled.data(),
                     scratch.entries.data(), threads);
  seconds[1] += lap();
  const bool exact_part = e.n > 0;
  float* part_out = exact_part ? scratch.part_out.data() : out;
  float* part_lse = exact_part ? scratch.part_lse.data() : lse;
  magicpig::attend(a, isa, part_out, part_lse, threads);
  seconds[2] += lap();
  for (int64_t i = 0; i < t.B * H; ++i) sampled[i] = static_cast<float>(scratch.sampled[static_cast<size_t>(i)]);
  if (!exact_part) return;
  e.prior_out = part_out;
  e.prior_lse = part_lse;
  magicpig::exact_attend(e, isa, out, lse, threads);
  seconds[3] += lap();
}

// One decode step of an offloaded layer on a CPU model, kernels 0, 2, 3 and 5 in one call (sparse_step):
// hash q (B, H, d) float32 with the tiled projections proj (S, P / 32, d, 32), retrieve from the tables,
// attend the sampled offloaded keys, then attend the static keys k_static / v_static (B, H_kv, s, d; s may be
// 0; only the first n_static of them when n_static >= 0: a growing buffer passed whole) exactly and merge.
// With k_new / v_new (B, H_kv, m, d), kernel 7 first writes k_new - center and v_new at rows n_static ..
// n_static + m of the static buffers, and those rows are attended too (the step's own key, appended in the
// same call). -> (out (B, H, d), lse (B, H) float32, sampled (B, H) float32, seconds (4,) float64 of the four
// parts: hash, retrieve, attend, exact)
std::vector<torch::Tensor> decode_step(torch::Tensor kv, torch::Tensor offsets, torch::Tensor ids, int64_t K,
                                       torch::Tensor proj, torch::Tensor q, double scale, torch::Tensor table,
                                       double table_limit, int64_t L, int64_t min_collisions, torch::Tensor k_static,
                                       torch::Tensor v_static, int64_t n_static,
                                       c10::optional<torch::Tensor> k_new, c10::optional<torch::Tensor> v_new,
                                       c10::optional<torch::Tensor> center, int64_t isa, int64_t threads,
                                       int64_t prefetch, int64_t split_tokens) {
  TORCH_CHECK(k_new.has_value() == v_new.has_value(), "give both k_new and v_new, or neither");
  if (k_new.has_value()) {
    TORCH_CHECK(n_static >= 0, "k_new needs n_static, the buffers' filled rows");
    append_kv(k_static, v_static, n_static, *k_new, *v_new, center);
    n_static += k_new->size(2);
  }
  const SparsePlan s = sparse_plan(kv, offsets, ids, K, proj, q, scale, table, table_limit, L, min_collisions,
                                   prefetch, split_tokens);
  magicpig::ExactArgs e = exact_args(q, k_static, v_static, scale);
  TORCH_CHECK(e.Hkv == s.t.Hkv, "k_static must have the tables' H_kv");
  TORCH_CHECK(n_static <= e.n, "n_static = ", n_static, " but k_static holds ", e.n, " rows");
  if (n_static >= 0) e.n = n_static;  // the first n_static rows of a growing buffer
  const int64_t H = q.size(1);
  auto out = torch::empty({s.t.B, H, s.a.d}, torch::kFloat32);
  auto lse = torch::empty({s.t.B, H}, torch::kFloat32);
  auto sampled = torch::empty({s.t.B, H}, torch::kFloat32);
  auto seconds = torch::zeros({4}, torch::kFloat64);
  sparse_step(s, q.data_ptr<float>(), e, static_cast<int>(isa), static_cast<int>(threads), out.data_ptr<float>(),
              lse.data_ptr<float>(), sampled.data_ptr<float>(), seconds.data_ptr<double>());
  return {out, lse, sampled, seconds};
}

void check_bf16(const torch::Tensor& t, const char* name) {
  check_cpu_contig(t, name);
  check_dtype(t, torch::kBFloat16, name);
  TORCH_CHECK(t.dim() == 4, name, " must be 4-D, got ", t.dim(), " dimensions");
}

// Kernel 8: q (B, H, q, d), k and v (B, H_kv, kv, d) bfloat16 contiguous, q <= kv -> (B, q, H, d) float32.
torch::Tensor prefill_attend(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale, int64_t threads) {
  check_bf16(q, "q");
  check_bf16(k, "k");
  check_bf16(v, "v");
  TORCH_CHECK(magicpig::prefill_supported(), "prefill_attend needs a CPU with AVX512-BF16");
  const int64_t B = q.size(0), H = q.size(1), nq = q.size(2), d = q.size(3), Hkv = k.size(1), kv = k.size(2);
  TORCH_CHECK(k.sizes() == v.sizes(), "k and v must have the same shape");
  TORCH_CHECK(k.size(0) == B && k.size(3) == d, "k must be (B, H_kv, kv, d) with q's B and d");
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0, "H must be a multiple of H_kv, got H = ", H, ", H_kv = ", Hkv);
  TORCH_CHECK(d % 32 == 0 && d > 0 && d <= 256, "head dim must be a multiple of 32 in [32, 256], got ", d);
  TORCH_CHECK(nq >= 1 && nq <= kv, "q's length must be in [1, kv], got ", nq, " for kv = ", kv);
  TORCH_CHECK(threads >= 1, "threads must be >= 1, got ", threads);
  auto out = torch::empty({B, nq, H, d}, torch::kFloat32);
  const magicpig::PrefillArgs a{B, H, Hkv, nq, kv, d, reinterpret_cast<const uint16_t*>(q.data_ptr()),
                                reinterpret_cast<const uint16_t*>(k.data_ptr()),
                                reinterpret_cast<const uint16_t*>(v.data_ptr()), static_cast<float>(scale),
                                out.data_ptr<float>()};
  magicpig::prefill_attend(a, static_cast<int>(threads));
  return out;
}

// data viewed as rows of row_bytes; rows (count,) int64 row indices
int64_t gather_rows(torch::Tensor data, int64_t row_bytes, torch::Tensor rows, int64_t prefetch, int64_t threads,
                    int64_t isa) {
  check_cpu_contig(data, "data");
  check_cpu_contig(rows, "rows");
  check_dtype(rows, torch::kInt64, "rows");
  TORCH_CHECK(row_bytes > 0 && row_bytes % 8 == 0, "row_bytes must be a positive multiple of 8");
  const int64_t n_rows = data.numel() * data.element_size() / row_bytes;
  const int64_t* r = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows.numel(); ++i)
    TORCH_CHECK(r[i] >= 0 && r[i] < n_rows, "rows must lie in [0, ", n_rows, ")");
  return static_cast<int64_t>(magicpig::gather_rows(data.data_ptr(), row_bytes, r, rows.numel(),
                                                    static_cast<int>(std::max<int64_t>(prefetch, 0)),
                                                    static_cast<int>(threads), static_cast<int>(isa)));
}

int64_t stream_read(torch::Tensor data, int64_t threads) {
  check_cpu_contig(data, "data");
  return static_cast<int64_t>(magicpig::stream_read(data.data_ptr(), data.numel() * data.element_size() / 8 * 8,
                                                    static_cast<int>(threads)));
}

}  // namespace

#include "bindings_loop.h"  // uses the checked-argument helpers above

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "MagicPIG CPU kernels: hash tables, retrieval, importance-weighted sparse attention";
  m.def("cpu_supports", [](int64_t isa) { return magicpig::cpu_supports(static_cast<int>(isa)); },
        "whether this CPU runs ISA variant isa (0 scalar, 1 avx2, 2 avx512)");
  m.def("hash_keys", &hash_keys,
        "kernel 0: (keys, center, proj, lo, count, m, K, L, table_major, isa, threads) -> codes");
  m.def("build_tables_table_major", &build_tables_table_major,
        "kernel 1 from table-major codes (B, H_kv, L, n_max): -> (offsets, ids)");
  m.def("build_tables", &build_tables, "kernel 1: (codes, counts, K, threads) -> (offsets, ids)");
  m.def("retrieve", &retrieve, "kernel 2: -> (bits, sampled, entries)");
  m.def("attend", &attend, "kernel 3: -> (out, lse)");
  m.def("decode_step", &decode_step, "kernels 0, 2, 3, 5: one decode step of an offloaded layer -> "
        "(out, lse, sampled, seconds)");
  m.def("exact_attend", &exact_attend,
        "kernel 5: (q, k, v, scale, isa, threads, prior_out, prior_lse) -> (out, lse), exact decode");
  m.def("append_kv", &append_kv, "kernel 7: (k_buf, v_buf, n, k, v, center) writes k - center and v at rows n.. "
        "of the buffers");
  m.def("exact_correction", &exact_correction, "-ln(u(cos) + 1e-4), double-precision binomial tail");
  m.def("empty_huge", &empty_huge, "uninitialised tensor on 2 MiB-aligned, huge-page-advised memory");
  m.def("stream_read", &stream_read, "read a tensor with all threads (bandwidth probe)");
  m.def("gather_rows", &gather_rows, "read listed rows of a tensor with all threads (random-read probe; isa -1: the "
        "best variant)", py::arg("data"), py::arg("row_bytes"), py::arg("rows"), py::arg("prefetch"),
        py::arg("threads"), py::arg("isa") = -1);
  layer_bindings::define_layer(m);
  loop_bindings::define_loop(m);
  m.def("prefill_supported", &magicpig::prefill_supported, "whether this CPU runs kernel 8 (AVX512-BF16)");
  m.def("prefill_attend", &prefill_attend,
        "kernel 8: (q, k, v, scale, threads) -> (B, q, H, d) float32, exact causal attention of a bfloat16 "
        "prefill block (query i at position kv - q + i)");
}
