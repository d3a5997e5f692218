#include "base/device_choice.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace octet {

absl::StatusOr<DeviceChoice> ParseDeviceChoice(absl::string_view name) {
  if (name == "auto") return DeviceChoice::kAuto;
  if (name == "cpu") return DeviceChoice::kCpu;
  if (name == "cuda") return DeviceChoice::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("device '", name, "' is not auto, cpu or cuda"));
}

}  // namespace octet
