#include "worker/backends.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cpu/backend.h"

#if defined(OCTET_HAVE_CUDA)
#include "kernels/cuda/backend.h"
#include "kernels/cuda/device.h"
#endif

namespace octet {

absl::StatusOr<std::unique_ptr<Backend>> NewBackend(DeviceChoice device,
                                                    const CpuKernelOptions& cpu,
                                                    int cuda_device) {
  if (device == DeviceChoice::kCpu) return NewCpuBackend(cpu);
  if (cuda_device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", cuda_device, " is negative"));
  }
#if defined(OCTET_HAVE_CUDA)
  if (device == DeviceChoice::kCuda || CudaDeviceSupported(cuda_device)) {
    return NewCudaBackend(cuda_device);
  }
  return NewCpuBackend(cpu);
#else
  if (device == DeviceChoice::kCuda) {
    return absl::UnavailableError(
        "this build has no CUDA backend (OCTET_CUDA=OFF)");
  }
  return NewCpuBackend(cpu);
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> NewBackend(absl::string_view device,
                                                    const CpuKernelOptions& cpu,
                                                    int cuda_device) {
  OCTET_ASSIGN_OR_RETURN(const DeviceChoice kind, ParseDeviceChoice(device));
  return NewBackend(kind, cpu, cuda_device);
}

}  // namespace octet
