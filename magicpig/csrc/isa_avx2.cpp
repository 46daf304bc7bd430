// Kernels 3, 4 and 5 and the random-row probe, AVX2 + FMA variant (isa_variant.h).
#define MP_AVX2 1
#define MP_VARIANT avx2
#define MP_TARGET "avx2,fma"
#include "isa_variant.h"
