// Kernels 3, 4 and 5 and the random-row probe, portable scalar variant: attend_impl.h, linear_impl.h and
// probe_impl.h compiled with the baseline flags only. Always available; forced with MAGICPIG_ISA=scalar.
#include <cstdint>

#include "magicpig_cpu.h"

namespace magicpig {
namespace scalar {
#include "attend_impl.h"
#include "linear_impl.h"
#include "probe_impl.h"
}  // namespace scalar
}  // namespace magicpig
