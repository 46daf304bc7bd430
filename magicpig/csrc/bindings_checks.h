// Argument checks of the Python bindings (bindings.cpp and bindings_layer.h): each names the bad argument.
#pragma once

#include <torch/extension.h>

namespace magicpig {

inline void check_cpu_contig(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

inline void check_dtype(const torch::Tensor& t, torch::ScalarType type, const char* name) {
  TORCH_CHECK(t.scalar_type() == type, name, " must be ", c10::toString(type), ", got ",
              c10::toString(t.scalar_type()));
}

}  // namespace magicpig
