// Plain CUDA GEMMs, one thread per output element, binary32 accumulation in
// K order, and the per-row-group scaling epilogue. CublasLtGemm (gemm.h) uses
// them for shapes cuBLASLt rejects; tests call them directly. Same layouts and
// meaning as gemm.h; the scales are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "base/bf16.h"
#include "base/dtype.h"

namespace octet {

absl::Status CudaGemmE4m3Fallback(const uint8_t* qa, const float* d_scale_a,
                                  const uint8_t* qb, const float* d_scale_b,
                                  int64_t m, int64_t n, int64_t k, void* y,
                                  DType y_dtype, cudaStream_t stream);

absl::Status CudaGemmBf16Fallback(const Bf16* a, const Bf16* b, int64_t m,
                                  int64_t n, int64_t k, void* y, DType y_dtype,
                                  cudaStream_t stream);

// K blocks (CublasLtGemm::BlockSums when cuBLASLt refuses): y[b][r][c] =
// Σ_{i<k} a[r][b·k + i] · w[c][b·k + i] for b < batch, in K order, binary32,
// unscaled. a is [m][ld] and w [n][ld] (ld >= batch · k), both e4m3 codes or
// both bfloat16 (in_dtype); y is binary32 [batch][m][n].
absl::Status CudaGemmBlocksFallback(const void* a, const void* w,
                                    DType in_dtype, int64_t m, int64_t n,
                                    int64_t k, int64_t ld, int64_t batch,
                                    float* y, cudaStream_t stream);

// The most parts CudaTreeSum adds.
inline constexpr int64_t kMaxTreeSumParts = 64;

// out[i] = the `count` values parts[j · stride + i] added in TreeSum order
// (kernels/tree_sum.h, whose CPU TreeSum is its reference), for i < n.
// count <= kMaxTreeSumParts; out must not overlap parts.
absl::Status CudaTreeSum(const float* parts, int64_t count, int64_t stride,
                         int64_t n, float* out, cudaStream_t stream);

// The epilogue of an e4m3 GEMM with one activation scale per group of rows
// (CublasLtGemm::E4m3RowGroups, E4m3ColumnScales): y[r][c] = acc[r][c] ·
// (d_scale_a[g] · b) for row r's group g = d_row_group[r] (group 0 for every
// row when d_row_group is null), where b is *d_scale_b, or d_scale_b[c] with
// b_per_column (per-channel weight scales); the two scales multiplied first
// and the result rounded once to y_dtype. acc is binary32 [m][n]; y may be
// acc itself when y_dtype is kF32. d_scale_a null: no scaling, y = acc
// rounded once (unquantized sums, or sums scaled already). With `parts` > 1
// acc is that many [m][n] vectors, added first in TreeSum order (as
// CudaTreeSum adds them; y not acc). With `add` the value is added to y (y
// not acc), as CUDA's Add adds: y = y + value, rounded again
// (Backend::ScaleRows with RowsInto::kAdd). parts <= kMaxTreeSumParts.
absl::Status CudaScaleRowGroups(const float* acc, int64_t parts, int64_t m,
                                int64_t n, const float* d_scale_a,
                                const int32_t* d_row_group,
                                const float* d_scale_b, bool b_per_column,
                                void* y, DType y_dtype, bool add,
                                cudaStream_t stream);

// out[r] = d_scale_a[g] · *d_scale_b for r < m and its group g (as
// CudaScaleRowGroups: 0 when d_row_group is null): the row scales of
// E4m3RowGroups in one GEMM (cuBLASLt's outer-vector scales), the same
// products CudaScaleRowGroups applies.
absl::Status CudaRowScales(const float* d_scale_a, const int32_t* d_row_group,
                           const float* d_scale_b, int64_t m, float* out,
                           cudaStream_t stream);

}  // namespace octet
