// Kernel 3, AVX2 + FMA variant: attend_impl.h compiled for that instruction set. magicpig::attend
// only calls it when cpu_supports(kAvx2) holds, so the module still runs on older CPUs.
#include <cstdint>

#include "magicpig_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define MP_AVX2 1
namespace magicpig {
namespace avx2 {
#include "attend_impl.h"
}  // namespace avx2
}  // namespace magicpig
#pragma GCC pop_options
#else
namespace magicpig {
namespace avx2 {
void attend_group(const AttendArgs& a, int64_t b, int64_t kvh, const uint32_t* ids, const uint64_t* masks,
                  int64_t U, float* part) {
  scalar::attend_group(a, b, kvh, ids, masks, U, part);  // never selected off x86
}
}  // namespace avx2
}  // namespace magicpig
#endif
