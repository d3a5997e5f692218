// CUDA kernels of the Llama forward's non-GEMM operations, on bfloat16
// activations (binary32 arithmetic inside, one rounding at the end). Same
// semantics as the Backend methods (kernels/backend.h) and as the CPU
// references (kernels/cpu/ops.h) that tests/kernels/cuda_ops_test.cc checks
// them against. All enqueue on `stream` and return launch errors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace octet::cuda {

absl::Status Embedding(const void* table, DType table_dtype, int64_t rows,
                       int64_t cols, int64_t row_begin, const int32_t* ids,
                       int64_t n, void* out, cudaStream_t stream);
absl::Status RmsNorm(const void* x, const float* weight, int64_t rows,
                     int64_t cols, float eps, void* out, cudaStream_t stream);
absl::Status Add(void* x, const void* y, int64_t count, cudaStream_t stream);
absl::Status Rope(void* x, int64_t rows, int64_t heads, int64_t head_dim,
                  int64_t row_stride, const int32_t* positions,
                  const float* inv_freq, cudaStream_t stream);
// Backend::RopeWriteKv: Rope and WriteKv in one launch.
absl::Status RopeWriteKv(void* qkv, int64_t heads, int64_t kv_heads,
                         int64_t head_dim, int64_t row_stride,
                         const float* inv_freq, const AttentionMetadata& meta,
                         void* k_cache, void* v_cache, cudaStream_t stream);
absl::Status RmsNormHeads(void* x, int64_t rows, int64_t heads,
                          int64_t head_dim, int64_t row_stride,
                          const float* weight, float eps, cudaStream_t stream);
absl::Status AddBias(void* x, const float* bias, int64_t rows, int64_t cols,
                     cudaStream_t stream);
absl::Status SiluMul(const void* x, int64_t rows, int64_t cols, void* out,
                     cudaStream_t stream);
absl::Status WriteKv(const void* k, const void* v, int64_t row_stride,
                     int64_t kv_heads, int64_t head_dim,
                     const AttentionMetadata& meta, void* k_cache,
                     void* v_cache, cudaStream_t stream);
// Attention keeps query rows in registers: at most 8 dims per lane of a warp.
inline constexpr int64_t kAttentionMaxHeadDim = 256;
// Backend::Attention with each token's keys cut into `splits` parts
// (attention_plan.h: AttentionSplits); more than one part needs `partials`,
// AttentionPartialFloats binary32 values of device scratch.
absl::Status Attention(const void* q, int64_t q_stride, int64_t heads,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, const void* k_cache,
                       const void* v_cache, void* out, int64_t splits,
                       float* partials, cudaStream_t stream);
// Backend::FusedAbsMax and FusedQuantize: a block per row makes the row's
// values with the producer's own arithmetic and bfloat16 rounding, then folds
// |value| into its group's absmax (row_group null: one group), or encodes
// value · inv with its group's scale.
absl::Status FusedAbsMax(const FusedInput& in, int64_t rows, int64_t cols,
                         const int32_t* row_group, int64_t groups,
                         float* absmax, cudaStream_t stream);
absl::Status FusedQuantize(const FusedInput& in, int64_t rows, int64_t cols,
                           const int32_t* row_group, const float* absmax,
                           uint8_t* q, float* scale, cudaStream_t stream);
// Both at once where every row is its own group (Backend::QuantizeOwnRows):
// one kernel, a block per row; absmax[r] and scale[r] receive row r's.
absl::Status FusedQuantizeOwnRows(const FusedInput& in, int64_t rows,
                                  int64_t cols, float* absmax, uint8_t* q,
                                  float* scale, cudaStream_t stream);
// Both at once for any groups: one cooperative launch
// (group_quantize.cuh), or the two calls where the device refuses those.
absl::Status FusedQuantizeGroups(const FusedInput& in, int64_t rows,
                                 int64_t cols, const int32_t* row_group,
                                 int64_t groups, float* absmax, uint8_t* q,
                                 float* scale, cudaStream_t stream);
absl::Status GatherRows(const void* x, int64_t cols, const int32_t* rows,
                        int64_t n, void* out, cudaStream_t stream);

}  // namespace octet::cuda
