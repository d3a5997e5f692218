// Picks the backend a worker runs on: the CPU, CUDA (GPU `cuda_device`),
// or auto (CUDA when this build has it and that GPU is a supported one, else
// the CPU).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/device_choice.h"
#include "kernels/backend.h"
#include "kernels/cpu/options.h"

namespace octet {

// InvalidArgument for a negative GPU index; Unavailable when CUDA is asked
// for and there is no CUDA build or no usable GPU.
absl::StatusOr<std::unique_ptr<Backend>> NewBackend(DeviceChoice device,
                                                    const CpuKernelOptions& cpu,
                                                    int cuda_device = 0);
// The same, with the device as a flag names it.
absl::StatusOr<std::unique_ptr<Backend>> NewBackend(absl::string_view device,
                                                    const CpuKernelOptions& cpu,
                                                    int cuda_device = 0);

}  // namespace octet
