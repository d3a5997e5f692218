// Reductions across one thread block, for kernels in which every thread
// holds one partial value: a butterfly of warp shuffles, then one value per
// warp through shared memory and a second butterfly. The result is valid in
// every thread. Every thread of the block must call it (it holds
// __syncthreads), with kBlockThreads the block's size, a multiple of 32.
// BlockMax is for values >= 0 (absolute maxima): warps past the last read 0.
#pragma once

#include <cuda_runtime.h>

namespace octet {

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <typename Op>
__device__ inline float WarpReduce(float v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
  }
  return v;
}

template <int kBlockThreads, typename Op>
__device__ inline float BlockReduce(float v, Op op) {
  static_assert(kBlockThreads % 32 == 0 && kBlockThreads <= 1024);
  __shared__ float per_warp[kBlockThreads / 32];
  v = WarpReduce(v, op);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // per_warp may still be read by a previous call
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  v = lane < kBlockThreads / 32 ? per_warp[lane] : 0.0f;
  return WarpReduce(v, op);
}

template <int kBlockThreads>
__device__ inline float BlockSum(float v) {
  return BlockReduce<kBlockThreads>(v, SumOp{});
}

template <int kBlockThreads>
__device__ inline float BlockMax(float v) {
  return BlockReduce<kBlockThreads>(v, MaxOp{});
}

}  // namespace octet
