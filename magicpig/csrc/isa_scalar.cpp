// Kernels 3, 4 and 5, portable scalar variant: attend_impl.h and linear_impl.h compiled with the baseline
// flags only. Always available; forced with MAGICPIG_ISA=scalar.
#include <cstdint>

#include "magicpig_cpu.h"

namespace magicpig {
namespace scalar {
#include "attend_impl.h"
#include "linear_impl.h"
}  // namespace scalar
}  // namespace magicpig
