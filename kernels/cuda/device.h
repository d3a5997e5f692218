// Which CUDA devices this process can use. Safe to call on machines with no
// GPU or no driver: they report zero devices, never an error or a crash.
#pragma once

#include <string>

namespace octet {

// Number of CUDA devices usable by this process; 0 when there is no driver,
// no device, or the runtime cannot start. Thread-safe.
int CudaDeviceCount();

// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)", or why there is none.
std::string DescribeCudaDevice(int device);

}  // namespace octet
