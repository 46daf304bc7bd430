// Kernel 4, AVX-512 (F + BW) variant: linear_impl.h compiled for that instruction set (selected only where
// cpu_supports(kAvx512) holds).
#include <cstdint>

#include "magicpig_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma")
#define MP_AVX512 1
namespace magicpig {
namespace avx512 {
#include "linear_impl.h"
}  // namespace avx512
}  // namespace magicpig
#pragma GCC pop_options
#else
namespace magicpig {
namespace avx512 {
void linear_block(const LinearArgs& a, int64_t o0, int64_t on) { scalar::linear_block(a, o0, on); }
}  // namespace avx512
}  // namespace magicpig
#endif
