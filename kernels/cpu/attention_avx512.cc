// The CPU attention kernel (attention_kernels.h) built with the AVX-512
// flags (kernels/CMakeLists.txt): attention_item.h's loops, vectorized for
// this level.
#include "kernels/cpu/attention_item.h"
#include "kernels/cpu/attention_kernels.h"

namespace octet::cpu_internal {

const AttentionKernels kAttentionAvx512 = {AttentionItemKernel};

}  // namespace octet::cpu_internal
