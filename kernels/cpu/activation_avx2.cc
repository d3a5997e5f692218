// The CPU activation kernels (activation_kernels.h) built with -mavx2 -mfma
// -mf16c: vector_math.h's loops, vectorized for this level.
#include "kernels/cpu/activation_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace octet::cpu_internal {

const ActivationKernels kActivationAvx2 = {SiluMulRow};

}  // namespace octet::cpu_internal
