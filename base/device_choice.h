// The device a rank computes on, as every command names it (--device):
// "auto" (CUDA when the build has it and the GPU is a supported one, else
// the CPU), "cpu" or "cuda". One parser for the coordinator, the worker and
// the tools, so that the three accept the same names and say the same
// thing about a wrong one.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octet {

enum class DeviceChoice { kAuto, kCpu, kCuda };

// InvalidArgument naming `name` when it is not auto, cpu or cuda.
absl::StatusOr<DeviceChoice> ParseDeviceChoice(absl::string_view name);

}  // namespace octet
