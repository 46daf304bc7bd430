// Kernels 3, 4 and 5 and the random-row probe, AVX2 + FMA variant: attend_impl.h, linear_impl.h and
// probe_impl.h compiled for that instruction set. The drivers only call it when cpu_supports() says this
// CPU runs it, so the module still runs on older CPUs (the original system died with "Illegal
// instruction" there).
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
#include "linear_impl.h"
#include "probe_impl.h"
}  // namespace avx2
}  // namespace magicpig
#pragma GCC pop_options
#else
namespace magicpig {
namespace avx2 {  // never selected off x86
void attend_group(const AttendArgs& a, int64_t b, int64_t kvh, const uint32_t* ids, const uint64_t* masks,
                  int64_t U, float* part) {
  scalar::attend_group(a, b, kvh, ids, masks, U, part);
}
void exact_range(const ExactArgs& a, int64_t b, int64_t kvh, int64_t t0, int64_t t1, float* part) {
  scalar::exact_range(a, b, kvh, t0, t1, part);
}
void linear_block(const LinearArgs& a, int64_t o0, int64_t on) { scalar::linear_block(a, o0, on); }
uint64_t gather_rows(const void* data, int64_t row_bytes, const int64_t* rows, int64_t count, int prefetch,
                     int threads) {
  return scalar::gather_rows(data, row_bytes, rows, count, prefetch, threads);
}
}  // namespace avx2
}  // namespace magicpig
#endif
