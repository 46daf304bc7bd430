// Kernel 4, portable scalar variant: linear_impl.h compiled with the baseline flags only.
#include <cstdint>

#include "magicpig_cpu.h"

namespace magicpig {
namespace scalar {
#include "linear_impl.h"
}  // namespace scalar
}  // namespace magicpig
