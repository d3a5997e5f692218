#include "worker/backends.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/backend.h"

#if defined(OCTET_HAVE_CUDA)
#include "kernels/cuda/backend.h"
#include "kernels/cuda/device.h"
#endif

namespace octet {

absl::StatusOr<std::unique_ptr<Backend>> NewBackend(absl::string_view device,
                                                    const CpuKernelOptions& cpu,
                                                    int cuda_device) {
  if (device == "cpu") return NewCpuBackend(cpu);
  if (device != "auto" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", device, "' is not auto, cpu or cuda"));
  }
  if (cuda_device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", cuda_device, " is negative"));
  }
#if defined(OCTET_HAVE_CUDA)
  if (device == "cuda" || CudaDeviceSupported(cuda_device)) {
    return NewCudaBackend(cuda_device);
  }
  return NewCpuBackend(cpu);
#else
  if (device == "cuda") {
    return absl::UnavailableError(
        "this build has no CUDA backend (OCTET_CUDA=OFF)");
  }
  return NewCpuBackend(cpu);
#endif
}

}  // namespace octet
