// Which CUDA devices this process can use. Safe to call on machines with no
// GPU or no driver: they report zero devices, never an error or a crash.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace octet {

// The oldest GPUs octet's CUDA kernels run on: compute capability 8.9 (Ada),
// the first with FP8 tensor cores; the build targets sm_89 and sm_90a.
inline constexpr int kMinCudaComputeCapability = 89;

// Number of CUDA devices visible to this process; 0 when there is no driver,
// no device, or the runtime cannot start. Thread-safe.
int CudaDeviceCount();

// Compute capability as major * 10 + minor (90 for an H100/H200), or 0 when
// the device does not exist.
int CudaComputeCapability(int device);

// True when `device` exists and is new enough for octet's CUDA kernels.
bool CudaDeviceSupported(int device);

// Makes `device` the calling thread's current CUDA device (the runtime keeps
// one per thread), if it is not already; Unavailable when that fails.
absl::Status BindCudaDevice(int device);

// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)", or why there is none.
std::string DescribeCudaDevice(int device);

}  // namespace octet
