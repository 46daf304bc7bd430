// Kernel 3, portable scalar variant: attend_impl.h compiled with the baseline flags only. Always
// available; forced with MAGICPIG_ISA=scalar.
#include <cstdint>

#include "magicpig_cpu.h"

namespace magicpig {
namespace scalar {
#include "attend_impl.h"
}  // namespace scalar
}  // namespace magicpig
