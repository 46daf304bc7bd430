// Kernels 3, 4 and 5 and the random-row probe, AVX-512 (F + BW) variant (isa_variant.h).
#define MP_AVX512 1
#define MP_VARIANT avx512
#define MP_TARGET "avx512f,avx512bw,avx512vl,avx2,fma"
#include "isa_variant.h"
