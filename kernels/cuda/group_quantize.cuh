// The per-row bodies of FP8 quantization with one scale per row group (a
// sequence, or a token), shared by the kernels that read their input from
// memory (quantize.cu: GroupAbsMaxKernel, GroupQuantizeKernel) and those
// that make it where it is quantized (ops.cu: FusedAbsMaxKernel,
// FusedQuantizeKernel, and their one-pass forms for rows that are their own
// groups). One block per row, blockIdx.x the row; `Row` is
// anything with `float operator()(int64_t c) const`, value c of that row.
// row_group null: every row is in group 0.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/fp8.h"

namespace octet {

// Folds |value| over the row, then into its group's slot. Non-negative
// binary32 values order like their bit patterns as integers, so atomicMax
// on the bits is an exact, order-independent max (the slots start at +0).
template <int kBlockThreads, typename Row>
__device__ inline void GroupAbsMaxRow(const Row& row, int64_t cols,
                                      const int32_t* row_group,
                                      float* absmax) {
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    m = fmaxf(m, fabsf(row(c)));
  }
  m = BlockMax<kBlockThreads>(m);
  if (threadIdx.x == 0) {
    const int32_t g = row_group != nullptr ? row_group[blockIdx.x] : 0;
    atomicMax(reinterpret_cast<int*>(absmax + g), __float_as_int(m));
  }
}

// The row's codes with its group's scale (the contract's rule on the
// group's absmax); the group's first row publishes the scale.
template <int kBlockThreads, typename Row>
__device__ inline void GroupQuantizeRow(const Row& row, int64_t cols,
                                        const int32_t* row_group,
                                        const float* absmax, uint8_t* q,
                                        float* scale) {
  const int64_t r = blockIdx.x;
  const int32_t g = row_group != nullptr ? row_group[r] : 0;
  const E4m3Scale s = E4m3ScaleFromAbsmax(absmax[g]);
  const bool first_of_group =
      r == 0 || (row_group != nullptr && row_group[r - 1] != g);
  if (threadIdx.x == 0 && first_of_group) scale[g] = s.scale;
  uint8_t* qr = q + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    qr[c] = __nv_cvt_float_to_fp8(row(c) * s.inv, __NV_SATFINITE, __NV_E4M3);
  }
}

// A row that is its own group (blockIdx.x its row and its group): the
// absmax from the block's own reduction, then the codes, in one pass of
// the block; absmax[r] and scale[r] receive the row's. The same bits as
// GroupAbsMaxRow then GroupQuantizeRow: the same fold and the same rule.
template <int kBlockThreads, typename Row>
__device__ inline void OwnGroupQuantizeRow(const Row& row, int64_t cols,
                                           float* absmax, uint8_t* q,
                                           float* scale) {
  const int64_t r = blockIdx.x;
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    m = fmaxf(m, fabsf(row(c)));
  }
  m = BlockMax<kBlockThreads>(m);
  const E4m3Scale s = E4m3ScaleFromAbsmax(m);
  if (threadIdx.x == 0) {
    absmax[r] = m;
    scale[r] = s.scale;
  }
  uint8_t* qr = q + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    qr[c] = __nv_cvt_float_to_fp8(row(c) * s.inv, __NV_SATFINITE, __NV_E4M3);
  }
}

}  // namespace octet
