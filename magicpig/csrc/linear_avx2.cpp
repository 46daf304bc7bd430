// Kernel 4, AVX2 + FMA variant: linear_impl.h compiled for that instruction set (selected only where
// cpu_supports(kAvx2) holds).
#include <cstdint>

#include "magicpig_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define MP_AVX2 1
namespace magicpig {
namespace avx2 {
#include "linear_impl.h"
}  // namespace avx2
}  // namespace magicpig
#pragma GCC pop_options
#else
namespace magicpig {
namespace avx2 {
void linear_block(const LinearArgs& a, int64_t o0, int64_t on) { scalar::linear_block(a, o0, on); }
}  // namespace avx2
}  // namespace magicpig
#endif
