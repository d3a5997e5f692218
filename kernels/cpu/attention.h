// Attention on the CPU as the backend runs it: the scalar reference
// (AttentionRef, ops.h) at the scalar level, else the vectorized kernel of
// the best level (attention_kernels.h says how it works and how its bits
// relate to the reference's).
#pragma once

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/options.h"

namespace octet::cpu {

// As AttentionRef: out[t][h] = softmax over t's context of q_t,h · k_j /
// sqrt(head_dim), times v_j, for every token of `meta`. FailedPrecondition
// for an instruction-set level this CPU lacks.
absl::Status Attention(const float* q, int64_t q_stride, int64_t heads,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, const float* k_cache,
                       const float* v_cache, float* out,
                       const CpuKernelOptions& options);

}  // namespace octet::cpu
