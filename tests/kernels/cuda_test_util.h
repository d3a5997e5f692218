// Helpers for the `gpu` tests: device buffers and the skip-without-GPU rule.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda/device.h"

namespace octet::testing {

// Skips the test (reported as skipped by ctest) when there is no CUDA device
// octet's kernels can run on (compute capability 8.9 or newer).
#define OCTET_REQUIRE_CUDA_DEVICE()                   \
  do {                                                \
    if (!::octet::CudaDeviceSupported(0)) {           \
      GTEST_SKIP() << "no supported CUDA device ("    \
                   << ::octet::DescribeCudaDevice(0)  \
                   << "): this gpu test did not run"; \
    }                                                 \
  } while (false)

#define OCTET_ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A device allocation of `bytes` (plus slack for misaligned views).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&ptr_, bytes + 64) != cudaSuccess) ptr_ = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = void>
  T* get(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + byte_offset);
  }
  bool ok() const { return ptr_ != nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

template <typename T>
bool CopyToDevice(const std::vector<T>& host, void* device) {
  return cudaMemcpy(device, host.data(), host.size() * sizeof(T),
                    cudaMemcpyHostToDevice) == cudaSuccess;
}

template <typename T>
std::vector<T> CopyToHost(const void* device, size_t count) {
  std::vector<T> host(count);
  if (cudaMemcpy(host.data(), device, count * sizeof(T),
                 cudaMemcpyDeviceToHost) != cudaSuccess) {
    host.clear();
  }
  return host;
}

}  // namespace octet::testing
