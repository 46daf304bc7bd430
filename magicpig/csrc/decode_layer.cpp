// Kernel 6: the two halves of a Llama-family decoder layer's decode step around its attention, and the model's
// final norm and output head (see magicpig_cpu.h), so that a step of a CPU model costs a few module calls per
// layer instead of some forty tensor operations. The element-wise parts (RMSNorm, the rotary embedding,
// SiLU-and-multiply, the last in the ISA variant's vector loop) run on the calling thread: a step has one row per
// sequence, a few thousand floats, microseconds of work. The linear layers run through kernel 4 with all threads.
#include <cmath>
#include <vector>

#include "magicpig_cpu.h"

namespace magicpig {

// out[m] = x[m] / sqrt(mean(x[m]^2) + eps) * w, for M rows of D floats (transformers' RMSNorm in float32)
static void rms_norm_rows(const float* x, int64_t M, int64_t D, const float* w, float eps, float* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * D;
    float ss = 0.f;
    for (int64_t i = 0; i < D; ++i) ss += xm[i] * xm[i];
    const float r = 1.f / std::sqrt(ss / static_cast<float>(D) + eps);
    for (int64_t i = 0; i < D; ++i) out[m * D + i] = w[i] * (xm[i] * r);
  }
}

// x (d,) rotated in place: x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[d/2:], x[:d/2])
static void rope_row(float* x, const float* cos, const float* sin, int64_t d) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i + half] + a * sin[i + half];
  }
}

void attention_in(const LayerIn& a, const LinearArgs* qkv, float* normed, int isa, int threads) {
  rms_norm_rows(a.h, a.M, a.D, a.norm, a.eps, normed);
  linear(qkv, 3, isa, threads);
  const int64_t width = qkv[0].ldy, d = a.head_dim;
  for (int64_t m = 0; m < a.M; ++m)
    for (int64_t head = 0; head < a.heads + a.kv_heads; ++head)  // q and k heads; v is not rotated
      rope_row(qkv[0].y + m * width + head * d, a.cos + m * d, a.sin + m * d, d);
}

void mlp(const LayerIn& a, const LinearArgs* gate_up, LinearArgs& down, float* normed, float* act, int isa,
         int threads) {
  rms_norm_rows(a.h, a.M, a.D, a.norm, a.eps, normed);
  linear(gate_up, 2, isa, threads);
  const auto silu = MP_VARIANT_FN(isa, silu_mul);
  const int64_t F = gate_up[0].O, width = gate_up[0].ldy;
  for (int64_t m = 0; m < a.M; ++m) {
    const float* g = gate_up[0].y + m * width;
    const float* u = g + F;
    silu(g, u, act + m * F, F);
  }
  linear(&down, 1, isa, threads);
}

void norm_head(const LayerIn& a, const LinearArgs& head, float* normed, int isa, int threads) {
  rms_norm_rows(a.h, a.M, a.D, a.norm, a.eps, normed);
  linear(&head, 1, isa, threads);
}

}  // namespace magicpig
