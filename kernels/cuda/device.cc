// kernels/cuda/device.h through the CUDA runtime: every query turns a
// missing driver or device into "none" (0 devices, capability 0), clearing
// the runtime's error state, so that programs built with CUDA start and
// report on machines without a GPU.
#include "kernels/cuda/device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace octet {

int CudaDeviceCount() {
  int count = 0;
  // Without a driver this returns cudaErrorInsufficientDriver or
  // cudaErrorNoDevice; either way there is nothing to run on.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return count;
}

int CudaComputeCapability(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                             device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
}

bool CudaDeviceSupported(int device) {
  return device >= 0 && device < CudaDeviceCount() &&
         CudaComputeCapability(device) >= kMinCudaComputeCapability;
}

absl::Status BindCudaDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) {
    return absl::OkStatus();
  }
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(absl::StrCat(
        "cannot use CUDA device ", device, ": ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

std::string DescribeCudaDevice(int device) {
  cudaDeviceProp prop;
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::StrCat("no CUDA device ", device, ": ", cudaGetErrorString(e));
  }
  return absl::StrFormat("%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name,
                         prop.major, prop.minor, prop.multiProcessorCount,
                         prop.totalGlobalMem / double(1 << 30));
}

}  // namespace octet
