// Matrix products on the CPU: the float8 e4m3 GEMM that serves FP8 linear
// layers, and the BF16 GEMM that is its baseline.
//
// Layouts are the ones linear layers use: activations A[M,K] and weights
// B[N,K] (out_features x in_features), both row-major and dense, or the
// weights packed into panels (the *Panel* GEMMs, kernels/cpu/panels.h);
// the output Y[M,N] is row-major and dense. Products accumulate in binary32.
//
// Results depend only on the inputs and the instruction-set level, not on the
// thread count. Thread-safe and reentrant; buffers are the caller's and must
// not overlap the output. Any M, N, K >= 0 is valid (K == 0 gives zeros).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "base/bf16.h"
#include "base/dtype.h"
#include "kernels/cpu/options.h"

namespace octet {

// Y = (decode(qa) · decode(qb)ᵀ) · (scale_a · scale_b), with scale_a·scale_b
// rounded once to binary32 and applied once to each binary32 dot product.
// `y_dtype` is kF32 or kBf16 (rounded to nearest even). NaN codes propagate.
absl::Status GemmE4m3(const uint8_t* qa, float scale_a, const uint8_t* qb,
                      float scale_b, int64_t m, int64_t n, int64_t k, void* y,
                      DType y_dtype, const CpuKernelOptions& options = {});

// As GemmE4m3, with one activation scale per row: row r of Y is scaled by
// row_scale_a[r] · scale_b (rounded once). Batched sequences, each with its
// own dynamic activation scale, share one pass over the weights this way.
absl::Status GemmE4m3RowScales(const uint8_t* qa, const float* row_scale_a,
                               const uint8_t* qb, float scale_b, int64_t m,
                               int64_t n, int64_t k, void* y, DType y_dtype,
                               const CpuKernelOptions& options = {});

// As GemmE4m3RowScales, with one weight scale per output column (weights
// quantized per row, as an FP8 lm_head is: [N] scales): Y[r][c] =
// (qa_r · qb_c) · (row_scale_a[r] · col_scale_b[c]), the two scales
// multiplied first (one rounding), so each column is exactly
// GemmE4m3RowScales of that weight row alone with its scale.
absl::Status GemmE4m3ChannelScales(const uint8_t* qa, const float* row_scale_a,
                                   const uint8_t* qb, const float* col_scale_b,
                                   int64_t m, int64_t n, int64_t k, void* y,
                                   DType y_dtype,
                                   const CpuKernelOptions& options = {});

// Tensor-parallel-invariant sums (kernels/tree_sum.h) for row-parallel
// layers: K is cut into `k_blocks` equal blocks (k_blocks must divide K);
// each block's dot products are computed exactly as the GEMM above computes
// them for a K of that block alone, and the block sums are added in TreeSum
// order. sums[M][N] is decode(qa) · decode(qb)ᵀ unscaled, so that ranks can
// add theirs before the scales are applied; with k_blocks = 1,
// sums · (scale_a · scale_b) (scales multiplied first) is exactly
// GemmE4m3RowScales's binary32 result. The blocks' sums take
// k_blocks * M * N floats of scratch, kept by the calling thread.
absl::Status GemmE4m3BlockSums(const uint8_t* qa, const uint8_t* qb, int64_t m,
                               int64_t n, int64_t k, int64_t k_blocks,
                               float* sums,
                               const CpuKernelOptions& options = {});

// Y = A · Bᵀ for bfloat16 A and B; `y_dtype` is kF32 or kBf16.
absl::Status GemmBf16(const Bf16* a, const Bf16* b, int64_t m, int64_t n,
                      int64_t k, void* y, DType y_dtype,
                      const CpuKernelOptions& options = {});

// Y = bf16(A) · Bᵀ for binary32 activations A, each rounded to bfloat16
// (nearest even) first, and bfloat16 weights B, Y in binary32: GemmBf16 of
// the rounded A, whose products are exact, on vdpbf16ps where the level has
// it. K is cut into `k_blocks` blocks summed as GemmE4m3BlockSums does
// (k_blocks = 1: the plain GEMM). The unquantized linear layers of the CPU
// backend whose weights are bfloat16.
absl::Status GemmRoundedBf16BlockSums(const float* a, const Bf16* b, int64_t m,
                                      int64_t n, int64_t k, int64_t k_blocks,
                                      float* y,
                                      const CpuKernelOptions& options = {});

// The outer-product GEMMs (docs/decisions/2026-12-06-cpu-gemm-outer-
// product.md) over bfloat16 weights packed by PackBf16Panels
// (kernels/cpu/panels.h), for the same k_blocks. Each output is the
// binary32 sum of its K pairs in order from zero, per K block, whatever M,
// the thread count or the row's place in the batch; not the bits of
// GemmBf16, whose dot products add along K in lanes.
//
// GemmBf16 over panels packed with k_blocks = 1.
absl::Status GemmBf16Panels(const Bf16* a, const Bf16* panels, int64_t m,
                            int64_t n, int64_t k, void* y, DType y_dtype,
                            const CpuKernelOptions& options = {});
// GemmRoundedBf16BlockSums over panels packed with k_blocks.
absl::Status GemmRoundedBf16PanelBlockSums(
    const float* a, const Bf16* panels, int64_t m, int64_t n, int64_t k,
    int64_t k_blocks, float* y, const CpuKernelOptions& options = {});

// The e4m3 GEMMs over codes packed by PackE4m3Panels (panels.h) for the
// same k_blocks: GemmE4m3RowScales, GemmE4m3ChannelScales and
// GemmE4m3BlockSums with the panels' arithmetic, which is that of the
// bfloat16 panels over the decoded values (the same bits).
absl::Status GemmE4m3PanelRowScales(const uint8_t* qa, const float* row_scale_a,
                                    const uint8_t* panels, float scale_b,
                                    int64_t m, int64_t n, int64_t k, void* y,
                                    DType y_dtype,
                                    const CpuKernelOptions& options = {});
absl::Status GemmE4m3PanelChannelScales(
    const uint8_t* qa, const float* row_scale_a, const uint8_t* panels,
    const float* col_scale_b, int64_t m, int64_t n, int64_t k, void* y,
    DType y_dtype, const CpuKernelOptions& options = {});
absl::Status GemmE4m3PanelBlockSums(const uint8_t* qa, const uint8_t* panels,
                                    int64_t m, int64_t n, int64_t k,
                                    int64_t k_blocks, float* sums,
                                    const CpuKernelOptions& options = {});

// Y = A · Bᵀ for binary32 activations A and binary32 or bfloat16 weights B
// (`b_dtype`), Y in binary32: the unquantized linear layers of the CPU
// backend whose weights are binary32 (activations are binary32 there).
// Products are exact for bfloat16 weights; accumulation in binary32.
absl::Status GemmF32(const float* a, const void* b, DType b_dtype, int64_t m,
                     int64_t n, int64_t k, float* y,
                     const CpuKernelOptions& options = {});

// GemmF32 with K cut into `k_blocks` blocks, summed as GemmE4m3BlockSums
// does (for the unquantized row-parallel layers).
absl::Status GemmF32BlockSums(const float* a, const void* b, DType b_dtype,
                              int64_t m, int64_t n, int64_t k, int64_t k_blocks,
                              float* y, const CpuKernelOptions& options = {});

}  // namespace octet
