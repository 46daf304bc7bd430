// One vector ISA variant of kernels 3, 4 and 5 and the random-row probe: attend_impl.h, linear_impl.h and
// probe_impl.h compiled for the instruction set MP_TARGET inside namespace magicpig::MP_VARIANT. Included
// by isa_avx2.cpp and isa_avx512.cpp, which define MP_TARGET, MP_VARIANT and MP_AVX2 or MP_AVX512. The
// drivers call a variant only when cpu_supports() says this CPU runs it, so the module also runs on CPUs
// without it (code built for the instruction set alone stops there with "Illegal instruction"). Off x86
// nothing is compiled here: the variant's namespace is scalar's (magicpig_cpu.h).
#include <cstdint>

#include "magicpig_cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MP_PRAGMA(text) _Pragma(#text)
#define MP_TARGET_PRAGMA(isa) MP_PRAGMA(GCC target(isa))
#pragma GCC push_options
MP_TARGET_PRAGMA(MP_TARGET)
namespace magicpig {
namespace MP_VARIANT {
#include "attend_impl.h"
#include "linear_impl.h"
#include "probe_impl.h"
}  // namespace MP_VARIANT
}  // namespace magicpig
#pragma GCC pop_options
#endif
