// Kernel 3, AVX-512 (F + BW) variant: attend_impl.h compiled for that instruction set. magicpig::attend
// only calls it when cpu_supports(kAvx512) holds: CPUs without AVX-512 never execute these
// instructions (the original system died with "Illegal instruction" there).
#include <cstdint>

#include "magicpig_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma")
#define MP_AVX512 1
namespace magicpig {
namespace avx512 {
#include "attend_impl.h"
}  // namespace avx512
}  // namespace magicpig
#pragma GCC pop_options
#else
namespace magicpig {
namespace avx512 {
void attend_group(const AttendArgs& a, int64_t b, int64_t kvh, const uint32_t* ids, const uint64_t* masks,
                  int64_t U, float* part) {
  scalar::attend_group(a, b, kvh, ids, masks, U, part);  // never selected off x86
}
}  // namespace avx512
}  // namespace magicpig
#endif
