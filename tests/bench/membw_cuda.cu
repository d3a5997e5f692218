// Device memory read bandwidth: a grid-stride sum over a large buffer with
// 16-byte loads, timed with CUDA events.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>

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

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct EventDestroy {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
using Event = std::unique_ptr<CUevent_st, EventDestroy>;

absl::StatusOr<Event> NewEvent() {
  cudaEvent_t e = nullptr;
  OCTET_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  return Event(e);
}

}  // namespace

absl::StatusOr<double> CudaReadBandwidthGBps(size_t bytes, int reps) {
  const size_t n = bytes / sizeof(uint4);
  void* raw = nullptr;
  OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&raw, n * sizeof(uint4)));
  std::unique_ptr<void, CudaFree> buf(raw);
  OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&raw, sizeof(unsigned long long)));
  std::unique_ptr<void, CudaFree> sink(raw);
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemset(buf.get(), 1, n * sizeof(uint4)));
  int device = 0, sms = 0;
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  absl::StatusOr<Event> start = NewEvent(), stop = NewEvent();
  if (!start.ok()) return start.status();
  if (!stop.ok()) return stop.status();
  double best = 0;
  for (int r = 0; r < reps + 1; ++r) {  // the first pass warms up
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(start->get()));
    ReadKernel<<<sms * 8, 512>>>(static_cast<const uint4*>(buf.get()), n,
                                 static_cast<unsigned long long*>(sink.get()));
    OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop->get()));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop->get()));
    float ms = 0;
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&ms, start->get(), stop->get()));
    if (r > 0) best = std::max(best, n * sizeof(uint4) / (ms * 1e-3) / 1e9);
  }
  return best;
}

}  // namespace octet::bench
