// Python bindings of kernels 4 (linear) and 6 (attention_in, mlp_residual, norm_head): the decode step's linear
// layers, the two halves of a Llama-family layer around its attention and the model's output. Included once, by
// bindings.cpp (the one translation unit that includes torch, whose headers take most of the module's build),
// which registers them with ``define_layer``.
#pragma once

#include <torch/extension.h>

#include "bindings_checks.h"
#include "magicpig_cpu.h"

namespace layer_bindings {

using magicpig::check_cpu_contig;
using magicpig::check_dtype;

// The WeightFormat of a kernel-4 weight for inputs of width I: float32 or bfloat16 (O, I), or int8
// (O, I + 4 I / 32) holding kWeightQ8 rows (I a multiple of 32); checks the shape.
int weight_format(const torch::Tensor& w, int64_t I) {
  check_cpu_contig(w, "weight");
  TORCH_CHECK(w.dim() == 2, "weight must be 2-D, got ", w.sizes());
  switch (w.scalar_type()) {
    case torch::kFloat32:
    case torch::kBFloat16:
      TORCH_CHECK(w.size(1) == I, "x must be (M, I) and weight (O, I) with the same I, got I = ", I,
                  " and weight ", w.sizes());
      return w.scalar_type() == torch::kBFloat16 ? magicpig::kWeightBF16 : magicpig::kWeightF32;
    case torch::kChar:
      TORCH_CHECK(I % magicpig::kQ8Block == 0 && w.size(1) == magicpig::weight_row_bytes(magicpig::kWeightQ8, I),
                  "an int8 (q8_0) weight for inputs of width I (a multiple of 32) must be (O, I + I / 8): I int8 "
                  "values, then I / 32 float32 scales per row; got I = ", I, " and weight ", w.sizes());
      return magicpig::kWeightQ8;
    default:
      TORCH_CHECK(false, "weight must be float32, bfloat16 or int8 (q8_0 rows), got ", c10::toString(w.scalar_type()));
  }
  return 0;
}

// Kernel 4's parts for x (M, I) float32 and weights[p] (O_p, ...) in a WeightFormat (weight_format) with
// biases[p] (O_p,) float32 or None, writing side by side into y (M, sum O_p) float32 (added to it with
// `accumulate`); checks every argument.
std::vector<magicpig::LinearArgs> linear_parts(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                               const std::vector<c10::optional<torch::Tensor>>& biases,
                                               const torch::Tensor& y, bool accumulate) {
  check_cpu_contig(x, "x");
  check_dtype(x, torch::kFloat32, "x");
  TORCH_CHECK(x.dim() == 2, "x must be (M, I), got ", x.sizes());
  TORCH_CHECK(!weights.empty() && biases.size() == weights.size(),
              "weights must be a non-empty list and biases a list of the same length (None for no bias), got ",
              weights.size(), " weights and ", biases.size(), " biases");
  int64_t total = 0;
  std::vector<int> formats;
  for (size_t p = 0; p < weights.size(); ++p) {
    const auto& w = weights[p];
    formats.push_back(weight_format(w, x.size(1)));
    if (biases[p].has_value()) {
      check_cpu_contig(*biases[p], "bias");
      check_dtype(*biases[p], torch::kFloat32, "bias");
      TORCH_CHECK(biases[p]->dim() == 1 && biases[p]->size(0) == w.size(0), "bias must be (O,) with O = ", w.size(0));
    }
    total += w.size(0);
  }
  check_cpu_contig(y, "out");
  check_dtype(y, torch::kFloat32, "out");
  TORCH_CHECK(y.dim() == 2 && y.size(0) == x.size(0) && y.size(1) == total,
              "out must be (M, sum of the weights' rows) = (", x.size(0), ", ", total, "), got ", y.sizes());
  std::vector<magicpig::LinearArgs> parts;
  int64_t col = 0;
  for (size_t p = 0; p < weights.size(); ++p) {
    const auto& w = weights[p];
    parts.push_back({x.size(0), x.size(1), w.size(0), x.data_ptr<float>(), w.data_ptr(), formats[p],
                     biases[p].has_value() ? biases[p]->data_ptr<float>() : nullptr, y.data_ptr<float>() + col, total,
                     accumulate});
    col += w.size(0);
  }
  return parts;
}

int64_t rows_of(const std::vector<torch::Tensor>& weights) {
  int64_t total = 0;
  for (const auto& w : weights) total += w.dim() == 2 ? w.size(0) : 0;
  return total;
}

// x (M, I) float32; weights[p] (O_p, I); biases[p] (O_p,) or None -> y (M, O_0 + O_1 + ...) float32: the
// layers side by side, computed in one parallel region. With `into` (M, sum O_p) float32, the results are
// added to it (a residual connection) and it is returned.
torch::Tensor linear(torch::Tensor x, std::vector<torch::Tensor> weights,
                     std::vector<c10::optional<torch::Tensor>> biases, int64_t isa, int64_t threads,
                     c10::optional<torch::Tensor> into) {
  auto y = into.has_value() ? *into : torch::empty({x.size(0), rows_of(weights)}, torch::kFloat32);
  auto parts = linear_parts(x, weights, biases, y, into.has_value());
  magicpig::linear(parts.data(), static_cast<int64_t>(parts.size()), static_cast<int>(isa), static_cast<int>(threads));
  return y;
}

void check_layer_in(const torch::Tensor& h, const torch::Tensor& norm, size_t weights, size_t want) {
  check_cpu_contig(h, "h");
  check_dtype(h, torch::kFloat32, "h");
  TORCH_CHECK(h.dim() == 2, "h must be (M, D), got ", h.sizes());
  check_cpu_contig(norm, "norm");
  check_dtype(norm, torch::kFloat32, "norm");
  TORCH_CHECK(norm.dim() == 1 && norm.size(0) == h.size(1), "norm must be (D,) with D = ", h.size(1));
  TORCH_CHECK(weights == want, "expected ", want, " weight matrices, got ", weights);
}

// kernel 6, before the attention: h (M, D); norm (D,); weights / biases: q, k, v projections; cos, sin
// (M, head_dim) -> qkv (M, (heads + 2 kv_heads) head_dim): RMSNorm, the projections, rotary q and k
torch::Tensor attention_in(torch::Tensor h, torch::Tensor norm, double eps, std::vector<torch::Tensor> weights,
                           std::vector<c10::optional<torch::Tensor>> biases, torch::Tensor cos, torch::Tensor sin,
                           int64_t heads, int64_t kv_heads, int64_t isa, int64_t threads) {
  check_layer_in(h, norm, weights.size(), 3);
  TORCH_CHECK(heads > 0 && kv_heads > 0, "heads and kv_heads must be positive");
  const int64_t d = weights[0].dim() == 2 ? weights[0].size(0) / heads : 0;
  TORCH_CHECK(d > 0 && d % 2 == 0 && weights[0].size(0) == heads * d && weights[1].size(0) == kv_heads * d &&
                  weights[2].size(0) == kv_heads * d,
              "q / k / v weights must have heads x d / kv_heads x d rows with an even head dim d");
  for (const auto* t : {&cos, &sin}) {
    check_cpu_contig(*t, "cos/sin");
    check_dtype(*t, torch::kFloat32, "cos/sin");
    TORCH_CHECK(t->dim() == 2 && t->size(0) == h.size(0) && t->size(1) == d, "cos and sin must be (M, head_dim) = (",
                h.size(0), ", ", d, "), got ", t->sizes());
  }
  auto normed = torch::empty_like(h);
  auto y = torch::empty({h.size(0), rows_of(weights)}, torch::kFloat32);
  auto parts = linear_parts(normed, weights, biases, y, false);
  magicpig::LayerIn a{h.size(0), h.size(1), h.data_ptr<float>(), norm.data_ptr<float>(), static_cast<float>(eps),
                      heads, kv_heads, d, cos.data_ptr<float>(), sin.data_ptr<float>()};
  magicpig::attention_in(a, parts.data(), normed.data_ptr<float>(), static_cast<int>(isa), static_cast<int>(threads));
  return y;
}

// kernel 6, after the attention: h (M, D) += down(SiLU(gate(n)) * up(n)), n = RMSNorm(h) with norm (D,);
// weights / biases: gate, up, down. With attn (the attention output, M rows of O's input width, contiguous)
// and its output projection o (D, I) / o_bias, first h += attn o^T + o_bias: the whole layer after its
// attention in one call. Returns h (updated in place).
torch::Tensor mlp_residual(torch::Tensor h, torch::Tensor norm, double eps, std::vector<torch::Tensor> weights,
                           std::vector<c10::optional<torch::Tensor>> biases, int64_t isa, int64_t threads,
                           c10::optional<torch::Tensor> attn, c10::optional<torch::Tensor> o,
                           c10::optional<torch::Tensor> o_bias) {
  check_layer_in(h, norm, weights.size(), 3);
  TORCH_CHECK(attn.has_value() == o.has_value(), "give both attn and o (its output projection), or neither");
  if (attn.has_value()) {
    check_cpu_contig(*attn, "attn");
    TORCH_CHECK(attn->numel() % std::max<int64_t>(h.size(0), 1) == 0, "attn must hold M = ", h.size(0), " rows");
    const auto x = attn->view({h.size(0), h.size(0) ? attn->numel() / h.size(0) : 0});
    auto parts = linear_parts(x, {*o}, {o_bias}, h, true);
    magicpig::linear(parts.data(), 1, static_cast<int>(isa), static_cast<int>(threads));
  }
  TORCH_CHECK(biases.size() == 3, "expected 3 biases (None for none), got ", biases.size());
  TORCH_CHECK(weights[0].dim() == 2 && weights[2].dim() == 2, "gate and down must be 2-D");
  const int64_t F = weights[0].size(0);  // down's input width, stored as F values (or F + F / 8 q8_0 bytes)
  TORCH_CHECK(weights[2].size(1) == (weights[2].scalar_type() == torch::kChar
                                         ? magicpig::weight_row_bytes(magicpig::kWeightQ8, F) : F),
              "down's input width must equal gate's rows");
  auto normed = torch::empty_like(h);
  auto gate_up = torch::empty({h.size(0), rows_of({weights[0], weights[1]})}, torch::kFloat32);
  auto act = torch::empty({h.size(0), weights[0].size(0)}, torch::kFloat32);
  TORCH_CHECK(weights[1].dim() == 2 && weights[1].size(0) == weights[0].size(0), "gate and up must have the same rows");
  auto gu = linear_parts(normed, {weights[0], weights[1]}, {biases[0], biases[1]}, gate_up, false);
  auto down = linear_parts(act, {weights[2]}, {biases[2]}, h, true);
  magicpig::LayerIn a{h.size(0), h.size(1), h.data_ptr<float>(), norm.data_ptr<float>(), static_cast<float>(eps)};
  magicpig::mlp(a, gu.data(), down[0], normed.data_ptr<float>(), act.data_ptr<float>(), static_cast<int>(isa),
                static_cast<int>(threads));
  return h;
}

// kernel 6, the model's output: h (M, D); norm (D,) its final RMSNorm; weights / biases: the output head
// (V, D) -> logits (M, V) = RMSNorm(h) W^T + b
torch::Tensor norm_head(torch::Tensor h, torch::Tensor norm, double eps, std::vector<torch::Tensor> weights,
                        std::vector<c10::optional<torch::Tensor>> biases, int64_t isa, int64_t threads) {
  check_layer_in(h, norm, weights.size(), 1);
  auto normed = torch::empty_like(h);
  auto y = torch::empty({h.size(0), rows_of(weights)}, torch::kFloat32);
  auto parts = linear_parts(normed, weights, biases, y, false);
  magicpig::LayerIn a{h.size(0), h.size(1), h.data_ptr<float>(), norm.data_ptr<float>(), static_cast<float>(eps)};
  magicpig::norm_head(a, parts[0], normed.data_ptr<float>(), static_cast<int>(isa), static_cast<int>(threads));
  return y;
}

inline void define_layer(pybind11::module& m) {
  namespace py = pybind11;
  m.def("linear", &linear, "kernel 4: (x, weights, biases, isa, threads, into=None) -> [x W_p^T + b_p for each p] "
        "side by side (decode rows), added to `into` when given; W_p float32, bfloat16 or int8 q8_0 rows",
        py::arg("x"), py::arg("weights"), py::arg("biases"), py::arg("isa"), py::arg("threads"),
        py::arg("into") = py::none());
  m.def("attention_in", &attention_in, "kernel 6: (h, norm, eps, [Wq, Wk, Wv], biases, cos, sin, heads, kv_heads, "
        "isa, threads) -> qkv with q and k rotated");
  m.def("mlp_residual", &mlp_residual, "kernel 6: (h, norm, eps, [Wgate, Wup, Wdown], biases, isa, threads, attn=None, "
        "o=None, o_bias=None) -> h (+= attn o^T + o_bias) += MLP(RMSNorm(h)), in place", py::arg("h"), py::arg("norm"),
        py::arg("eps"), py::arg("weights"), py::arg("biases"), py::arg("isa"), py::arg("threads"),
        py::arg("attn") = py::none(), py::arg("o") = py::none(), py::arg("o_bias") = py::none());
  m.def("norm_head", &norm_head, "kernel 6: (h, norm, eps, [W_head], biases, isa, threads) -> RMSNorm(h) W_head^T + b");
}

}  // namespace layer_bindings
