// Picks the backend a worker runs on: "cpu", "cuda" (GPU `cuda_device`), or
// "auto" (CUDA when this build has it and that GPU is a supported one, else
// CPU).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/cpu/options.h"

namespace octet {

// InvalidArgument for an unknown name or a negative GPU index; Unavailable
// when "cuda" is asked for and there is no CUDA build or no usable GPU.
absl::StatusOr<std::unique_ptr<Backend>> NewBackend(absl::string_view device,
                                                    const CpuKernelOptions& cpu,
                                                    int cuda_device = 0);

}  // namespace octet
