// The per-row bodies of FP8 quantization with one scale per row group (a
// sequence, or a token), shared by the kernels that read their input from
// memory (quantize.cu: GroupAbsMaxKernel, GroupQuantizeKernel) and those
// that make it where it is quantized (ops.cu: FusedAbsMaxKernel,
// FusedQuantizeKernel, and their one-pass forms: a block per row for rows
// that are their own groups, a cooperative grid for any groups). A block
// works on row r; `Row` is anything with `float operator()(int64_t c)
// const`, value c of that row. row_group null: every row is in group 0.
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/fp8.h"

namespace octet {

// Folds |value| over the row, then into its group's slot. Non-negative
// binary32 values order like their bit patterns as integers, so atomicMax
// on the bits is an exact, order-independent max (the slots start at +0).
template <int kBlockThreads, typename Row>
__device__ inline void GroupAbsMaxRow(const Row& row, int64_t r, int64_t cols,
                                      const int32_t* row_group,
                                      float* absmax) {
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kBlockThreads) {
    m = fmaxf(m, fabsf(row(c)));
  }
  m = BlockMax<kBlockThreads>(m);
  if (threadIdx.x == 0) {
    const int32_t g = row_group != nullptr ? row_group[r] : 0;
    atomicMax(reinterpret_cast<int*>(absmax + g), __float_as_int(m));
  }
}

// The row's codes with its group's scale (the contract's rule on the
// group's absmax); the group's first row publishes the scale.
template <int kBlockThreads, typename Row>
__device__ inline void GroupQuantizeRow(const Row& row, int64_t r,
                                        int64_t cols, const int32_t* row_group,
                                        const float* absmax, uint8_t* q,
                                        float* scale) {
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

// Any row groups in one launch: a cooperative grid (every block resident
// at once) zeroes the groups' absmax slots, syncs, folds each row into its
// group's slot, syncs, and writes the codes; blocks take rows r, r +
// gridDim.x, ... The bits of GroupAbsMax then GroupQuantize (the same fold
// and rule) without their memset and second launch. `rows_of(r)` makes row
// r (every thread of the block calls it; it may hold block reductions).
template <int kBlockThreads, typename RowsOf>
__global__ void __launch_bounds__(kBlockThreads)
    GroupQuantizeGridKernel(RowsOf rows_of, int64_t rows, int64_t cols,
                            const int32_t* row_group, int64_t groups,
                            float* absmax, uint8_t* q, float* scale) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int64_t g = grid.thread_rank(); g < groups; g += grid.size()) {
    absmax[g] = 0.0f;
  }
  grid.sync();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    GroupAbsMaxRow<kBlockThreads>(rows_of(r), r, cols, row_group, absmax);
  }
  grid.sync();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    GroupQuantizeRow<kBlockThreads>(rows_of(r), r, cols, row_group, absmax, q,
                                    scale);
  }
}

// Whether a cooperative launch failed because the device will not run one
// here (not a fault): the caller then takes the separate kernels from now
// on (CooperativeLaunchesRefused), said once per process.
inline bool CooperativeRefused(cudaError_t e) {
  return e == cudaErrorCooperativeLaunchTooLarge || e == cudaErrorNotSupported;
}
inline std::atomic<bool>& CooperativeLaunchesRefused() {
  static std::atomic<bool> refused{false};
  return refused;
}
inline void SayCooperativeRefusedOnce(cudaError_t e) {
  CooperativeLaunchesRefused() = true;
  static std::once_flag once;
  std::call_once(once, [e] {
    std::fprintf(stderr,
                 "octet: FP8 inputs of several rows per sequence take three "
                 "launches, not one: this GPU refuses cooperative launches "
                 "(%s)\n",
                 cudaGetErrorString(e));
  });
}

// Launches GroupQuantizeGridKernel cooperatively on `stream` with as many
// blocks as the device holds at once (at most `rows`). An error where the
// device refuses cooperative launches (cudaErrorCooperativeLaunchTooLarge,
// cudaErrorNotSupported under some MPS or MIG set-ups): the caller falls
// back to the separate kernels.
template <int kBlockThreads, typename RowsOf>
cudaError_t LaunchGroupQuantizeGrid(RowsOf rows_of, int64_t rows, int64_t cols,
                                    const int32_t* row_group, int64_t groups,
                                    float* absmax, uint8_t* q, float* scale,
                                    cudaStream_t stream) {
  if (CooperativeLaunchesRefused()) return cudaErrorNotSupported;
  const auto kernel = GroupQuantizeGridKernel<kBlockThreads, RowsOf>;
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) {
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  if (e == cudaSuccess) {
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel,
                                                      kBlockThreads, 0);
  }
  if (e != cudaSuccess) return e;
  if (per_sm * sms == 0) return cudaErrorCooperativeLaunchTooLarge;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(
      std::min<int64_t>(rows, int64_t{per_sm} * sms)));
  config.blockDim = dim3(kBlockThreads);
  config.stream = stream;
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, rows_of, rows, cols, row_group,
                            groups, absmax, q, scale);
}

}  // namespace octet
