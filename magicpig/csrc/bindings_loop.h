// Python binding of the decode loop: a decode step of every layer of a Llama-family CPU model in one call of
// the module (magicpig/decode_loop.py builds it from an Engine's decoders). Included once, by bindings.cpp,
// after the checked-argument helpers it shares with the per-kernel bindings (tables_view, attend_args,
// exact_args, sparse_plan, sparse_step).
//
// A plan fixes every pointer a step needs: the layers' weights, the (B, H_kv, cap, d) buffers of their
// exact rows (a dense layer's keys and values, a sparse layer's static part) and, on a sparse layer, its
// offloaded keys, tables and projections; the intermediate rows live in the plan's own tensors. A step then
// runs, per layer, kernel 6's attention_in, kernel 7 (this step's key and value appended), the layer's
// attention (kernel 5, or sparse_step) and kernel 6's mlp with the output projection, with no allocation and
// no Python in between: the same kernels in the same order as the layer-by-layer route, so the same numbers.
#pragma once

#include <torch/extension.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bindings_checks.h"
#include "bindings_layer.h"
#include "magicpig_cpu.h"

namespace loop_bindings {

using magicpig::check_cpu_contig;
using magicpig::check_dtype;
using magicpig::LinearArgs;
using Biases = std::vector<c10::optional<torch::Tensor>>;

struct LoopLayer {
  std::vector<torch::Tensor> keep;  // every tensor the pointers below point into
  const float* in_norm = nullptr;
  const float* post_norm = nullptr;
  float in_eps = 0.f, post_eps = 0.f, scale = 0.f;
  std::vector<LinearArgs> qkv, o, gate_up, down;
  bool attention_set = false, sparse = false;
  torch::Tensor k_buf, v_buf;  // (B, H_kv, cap, d) exact rows, n of them filled
  int64_t n = 0;
  magicpig::ExactArgs exact{};
  SparsePlan plan{};  // sparse layers: the offloaded part
  torch::Tensor center;  // sparse layers: (B, H_kv, d) float32, subtracted from the appended keys
  int isa = 0, threads = 1;  // sparse layers: their own plan's
};

class DecodeLoop {
 public:
  // batch B, hidden D, heads H, kv_heads H_kv, head_dim d, ffn F (the MLP's width); isa / threads: the
  // linear layers' and the dense layers' attention's
  DecodeLoop(int64_t batch, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn,
             int64_t isa, int64_t threads)
      : B_(batch), D_(hidden), H_(heads), Hkv_(kv_heads), d_(head_dim), F_(ffn), isa_(static_cast<int>(isa)),
        threads_(static_cast<int>(threads)) {
    TORCH_CHECK(B_ > 0 && D_ > 0 && H_ > 0 && Hkv_ > 0 && H_ % Hkv_ == 0 && H_ / Hkv_ <= 64 && d_ > 0 &&
                    d_ % 2 == 0 && F_ > 0 && threads_ >= 1,
                "DecodeLoop: batch, hidden, heads, kv_heads (dividing heads, at most 64 heads each), an even "
                "head_dim, ffn and threads must be positive");
    const auto f = torch::kFloat32;
    h_ = torch::empty({B_, D_}, f);
    normed_ = torch::empty({B_, D_}, f);
    qkv_ = torch::empty({B_, (H_ + 2 * Hkv_) * d_}, f);
    q_ = torch::empty({B_, H_, d_}, f);
    out_ = torch::empty({B_, H_, d_}, f);
    lse_ = torch::empty({B_, H_}, f);
    gate_up_ = torch::empty({B_, 2 * F_}, f);
    act_ = torch::empty({B_, F_}, f);
  }

  // A layer's weights (as kernel 6's bindings take them): -> its index. Its attention comes next
  // (set_exact or set_sparse).
  int64_t add_layer(torch::Tensor in_norm, double in_eps, std::vector<torch::Tensor> qkv, Biases qkv_bias,
                    torch::Tensor o, c10::optional<torch::Tensor> o_bias, torch::Tensor post_norm, double post_eps,
                    std::vector<torch::Tensor> mlp, Biases mlp_bias, double scale) {
    layer_bindings::check_layer_in(h_, in_norm, qkv.size(), 3);
    layer_bindings::check_layer_in(h_, post_norm, mlp.size(), 3);
    TORCH_CHECK(qkv_bias.size() == 3 && mlp_bias.size() == 3, "expected 3 biases per list (None for none)");
    TORCH_CHECK(qkv[0].dim() == 2 && qkv[0].size(0) == H_ * d_ && qkv[1].dim() == 2 && qkv[1].size(0) == Hkv_ * d_,
                "q / k / v weights must have heads x head_dim / kv_heads x head_dim rows");
    TORCH_CHECK(mlp[0].dim() == 2 && mlp[0].size(0) == F_, "gate must have ffn = ", F_, " rows");
    LoopLayer l;
    l.in_norm = in_norm.data_ptr<float>();
    l.post_norm = post_norm.data_ptr<float>();
    l.in_eps = static_cast<float>(in_eps);
    l.post_eps = static_cast<float>(post_eps);
    l.scale = static_cast<float>(scale);
    l.qkv = layer_bindings::linear_parts(normed_, qkv, qkv_bias, qkv_, false);
    l.o = layer_bindings::linear_parts(out_.view({B_, H_ * d_}), {o}, {o_bias}, h_, true);
    l.gate_up = layer_bindings::linear_parts(normed_, {mlp[0], mlp[1]}, {mlp_bias[0], mlp_bias[1]}, gate_up_, false);
    l.down = layer_bindings::linear_parts(act_, {mlp[2]}, {mlp_bias[2]}, h_, true);
    l.keep = {in_norm, post_norm, o};
    for (auto* list : {&qkv, &mlp}) l.keep.insert(l.keep.end(), list->begin(), list->end());
    for (auto* list : {&qkv_bias, &mlp_bias})
      for (const auto& b : *list)
        if (b.has_value()) l.keep.push_back(*b);
    if (o_bias.has_value()) l.keep.push_back(*o_bias);
    layers_.push_back(std::move(l));
    return static_cast<int64_t>(layers_.size()) - 1;
  }

  // A dense layer: exact attention over the n filled rows of k_buf / v_buf (B, H_kv, cap, d) and this step's.
  void set_exact(int64_t i, torch::Tensor k_buf, torch::Tensor v_buf, int64_t n) {
    LoopLayer& l = layer(i);
    l.sparse = false;
    l.n = n;
    set_buffers(i, k_buf, v_buf);
    l.attention_set = true;
  }

  // A sparse layer: the offloaded part (as decode_step takes it: kv, offsets, ids, K, proj, table, ...,
  // isa, threads) and the static part in k_buf / v_buf (n rows filled, kept centred: this step's key is
  // written minus center (B, H_kv, d) float32).
  void set_sparse(int64_t i, torch::Tensor k_buf, torch::Tensor v_buf, int64_t n, torch::Tensor center,
                  torch::Tensor kv, torch::Tensor offsets, torch::Tensor ids, int64_t K, torch::Tensor proj,
                  torch::Tensor table, double table_limit, int64_t L, int64_t min_collisions, int64_t isa,
                  int64_t threads, int64_t prefetch, int64_t split_tokens) {
    LoopLayer& l = layer(i);
    l.plan = sparse_plan(kv, offsets, ids, K, proj, q_, l.scale, table, table_limit, L, min_collisions, prefetch,
                         split_tokens);
    TORCH_CHECK(l.plan.t.Hkv == Hkv_ && l.plan.a.d == d_, "layer ", i, ": the offloaded keys' H_kv and d must be ",
                Hkv_, " and ", d_);
    check_cpu_contig(center, "center");
    check_dtype(center, torch::kFloat32, "center");
    TORCH_CHECK(center.dim() == 3 && center.size(0) == B_ && center.size(1) == Hkv_ && center.size(2) == d_,
                "center must be (B, H_kv, d)");
    TORCH_CHECK(threads >= 1, "threads must be >= 1");
    l.center = center;
    l.isa = static_cast<int>(isa);
    l.threads = static_cast<int>(threads);
    l.keep.insert(l.keep.end(), {kv, offsets, ids, proj, table});
    l.sparse = true;
    l.n = n;
    set_buffers(i, k_buf, v_buf);
    l.attention_set = true;
  }

  // New storage for layer i's exact rows (grown; its first n rows are the old ones)
  void set_buffers(int64_t i, torch::Tensor k_buf, torch::Tensor v_buf) {
    LoopLayer& l = layer(i);
    for (const auto* t : {&k_buf, &v_buf}) {
      check_cpu_contig(*t, "k_buf / v_buf");
      TORCH_CHECK(t->dim() == 4 && t->size(0) == B_ && t->size(1) == Hkv_ && t->size(3) == d_,
                  "k_buf and v_buf must be (B, H_kv, cap, d) = (", B_, ", ", Hkv_, ", cap, ", d_, "), got ",
                  t->sizes());
    }
    TORCH_CHECK(l.n >= 0 && l.n <= k_buf.size(2), "layer ", i, ": n = ", l.n, " filled rows do not fit in ",
                k_buf.size(2));
    l.exact = exact_args(q_, k_buf, v_buf, l.scale);  // checks the dtypes and shapes against q
    l.k_buf = k_buf;
    l.v_buf = v_buf;
  }

  int64_t filled(int64_t i) { return layer(i).n; }

  // Rows every layer's buffers can still take (steps before a set_buffers is needed)
  int64_t room() const {
    int64_t r = INT64_MAX;
    for (const auto& l : layers_) r = std::min(r, l.k_buf.defined() ? l.k_buf.size(2) - l.n : 0);
    return layers_.empty() ? 0 : r;
  }

  // One decode step: h (B, D) the embedded tokens, cos / sin (B, d) their rotary embedding -> (h (B, D) after
  // the last layer: the plan's tensor, overwritten by the next step; sampled (S, B, H) float32, the sparse
  // layers' sampled counts in layer order; seconds (4,) float64: hash, retrieve, attend, exact summed)
  std::vector<torch::Tensor> step(torch::Tensor h, torch::Tensor cos, torch::Tensor sin) {
    check_cpu_contig(h, "h");
    check_dtype(h, torch::kFloat32, "h");
    TORCH_CHECK(h.sizes() == h_.sizes(), "h must be (B, D) = (", B_, ", ", D_, "), got ", h.sizes());
    for (const auto* t : {&cos, &sin}) {
      check_cpu_contig(*t, "cos/sin");
      check_dtype(*t, torch::kFloat32, "cos/sin");
      TORCH_CHECK(t->dim() == 2 && t->size(0) == B_ && t->size(1) == d_, "cos and sin must be (B, head_dim) = (", B_,
                  ", ", d_, "), got ", t->sizes());
    }
    TORCH_CHECK(!layers_.empty(), "the loop has no layers");
    int64_t sparse = 0;
    for (size_t i = 0; i < layers_.size(); ++i) {
      TORCH_CHECK(layers_[i].attention_set, "layer ", i, " has no attention (set_exact / set_sparse)");
      TORCH_CHECK(layers_[i].n < layers_[i].k_buf.size(2), "layer ", i, "'s buffers are full: grow them (set_buffers)");
      sparse += layers_[i].sparse;
    }
    std::memcpy(h_.data_ptr<float>(), h.data_ptr<float>(), sizeof(float) * B_ * D_);
    auto sampled = torch::empty({sparse, B_, H_}, torch::kFloat32);
    auto seconds = torch::zeros({4}, torch::kFloat64);
    double* sec = seconds.data_ptr<double>();
    float* hp = h_.data_ptr<float>();
    float* qkv = qkv_.data_ptr<float>();
    float* q = q_.data_ptr<float>();
    const int64_t width = qkv_.size(1);
    int64_t j = 0;
    for (auto& l : layers_) {
      const magicpig::LayerIn in{B_, D_, hp, l.in_norm, l.in_eps, H_, Hkv_, d_, cos.data_ptr<float>(),
                                 sin.data_ptr<float>()};
      magicpig::attention_in(in, l.qkv.data(), normed_.data_ptr<float>(), isa_, threads_);
      for (int64_t b = 0; b < B_; ++b) std::memcpy(q + b * H_ * d_, qkv + b * width, sizeof(float) * H_ * d_);
      append(l, qkv + H_ * d_, l.k_buf, l.sparse ? l.center.data_ptr<float>() : nullptr, width);
      append(l, qkv + (H_ + Hkv_) * d_, l.v_buf, nullptr, width);
      l.n += 1;
      l.exact.n = l.n;
      if (l.sparse) {
        sparse_step(l.plan, q, l.exact, l.isa, l.threads, out_.data_ptr<float>(), lse_.data_ptr<float>(),
                    sampled.data_ptr<float>() + j * B_ * H_, sec);
        ++j;
      } else {
        const auto t0 = std::chrono::steady_clock::now();
        magicpig::exact_attend(l.exact, isa_, out_.data_ptr<float>(), lse_.data_ptr<float>(), threads_);
        sec[3] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      magicpig::linear(l.o.data(), 1, isa_, threads_);  // h += out o^T + o_bias
      const magicpig::LayerIn post{B_, D_, hp, l.post_norm, l.post_eps};
      magicpig::mlp(post, l.gate_up.data(), l.down[0], normed_.data_ptr<float>(), act_.data_ptr<float>(), isa_,
                    threads_);
    }
    return {h_, sampled, seconds};
  }

 private:
  LoopLayer& layer(int64_t i) {
    TORCH_CHECK(i >= 0 && i < static_cast<int64_t>(layers_.size()), "layer index ", i, " out of range");
    return layers_[static_cast<size_t>(i)];
  }

  // kernel 7: this step's rows x (B, H_kv, 1, d) of the qkv scratch (row stride `width`) to row n of buf
  void append(const LoopLayer& l, const float* x, const torch::Tensor& buf, const float* center, int64_t width) {
    magicpig::append_rows(magicpig::AppendArgs{B_, Hkv_, 1, d_, buf.size(2), l.n, x, {width, d_, d_}, false, center,
                                               buf.data_ptr(), buf.scalar_type() == torch::kBFloat16});
  }

  int64_t B_, D_, H_, Hkv_, d_, F_;
  int isa_, threads_;
  torch::Tensor h_, normed_, qkv_, q_, out_, lse_, gate_up_, act_;
  std::vector<LoopLayer> layers_;
};

inline void define_loop(pybind11::module& m) {
  namespace py = pybind11;
  py::class_<DecodeLoop>(m, "DecodeLoop", "every layer of a decode step in one call (magicpig.decode_loop)")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>(), py::arg("batch"),
           py::arg("hidden"), py::arg("heads"), py::arg("kv_heads"), py::arg("head_dim"), py::arg("ffn"),
           py::arg("isa"), py::arg("threads"))
      .def("add_layer", &DecodeLoop::add_layer)
      .def("set_exact", &DecodeLoop::set_exact)
      .def("set_sparse", &DecodeLoop::set_sparse)
      .def("set_buffers", &DecodeLoop::set_buffers)
      .def("filled", &DecodeLoop::filled)
      .def("room", &DecodeLoop::room)
      .def("step", &DecodeLoop::step);
}

}  // namespace loop_bindings
