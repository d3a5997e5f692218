// Device memory read bandwidth: a grid-stride sum over a large buffer with
// 16-byte loads, timed with CUDA events.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "tests/bench/membw.h"

namespace octet::bench {
namespace {

__global__ void ReadKernel(const uint4* __restrict__ p, size_t n,
                           unsigned long long* sink) {
  uint32_t acc = 0;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) atomicAdd(sink, 1ull);  // keeps the loads alive
}

}  // namespace

absl::StatusOr<double> CudaReadBandwidthGBps(size_t bytes, int reps) {
  const size_t n = bytes / sizeof(uint4);
  uint4* buf = nullptr;
  unsigned long long* sink = nullptr;
  OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&buf, n * sizeof(uint4)));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&sink, sizeof(*sink)));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemset(buf, 1, n * sizeof(uint4)));
  int device = 0, sms = 0;
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaEvent_t start, stop;
  OCTET_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  OCTET_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  double best = 0;
  for (int r = 0; r < reps + 1; ++r) {  // the first pass warms up
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(start));
    ReadKernel<<<sms * 8, 512>>>(buf, n, sink);
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
    float ms = 0;
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) best = std::max(best, n * sizeof(uint4) / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(buf);
  cudaFree(sink);
  return best;
}

}  // namespace octet::bench
