// The CPU activation kernels (activation_kernels.h) built with the AVX-512
// flags (kernels/CMakeLists.txt): vector_math.h's loops, vectorized for
// this level.
#include "kernels/cpu/activation_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace octet::cpu_internal {

const ActivationKernels kActivationAvx512 = {SiluMulRow};

}  // namespace octet::cpu_internal
