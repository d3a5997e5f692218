// The CPU attention kernel (attention_kernels.h) built with -mavx2 -mfma
// -mf16c: attention_item.h's loops, vectorized for this level.
#include "kernels/cpu/attention_item.h"
#include "kernels/cpu/attention_kernels.h"

namespace octet::cpu_internal {

const AttentionKernels kAttentionAvx2 = {AttentionItemKernel};

}  // namespace octet::cpu_internal
