// Timing a backend's work, for profiles (bench_decode --profile). A
// DeviceClock takes marks on the device's own timeline -- each the moment
// the work enqueued before it has finished -- and, once that work is done,
// reads every mark's time since the first. Two marks around one operation
// time that operation as the device ran it, not its launch.
//
// The CPU backend's work is done when an operation returns, so its clock is
// the host's (HostClock, Backend::NewClock's default, waiting on the
// backend first). CUDA records events on its stream (kernels/cuda/
// backend.cc): a mark costs the host no wait.
#pragma once

#include <chrono>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace octet {

class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  // A mark after the work enqueued so far. Not while capturing.
  virtual absl::Status Mark() = 0;
  // Milliseconds from the first mark to each mark, in order (empty without
  // marks); waits for the work before the last mark.
  virtual absl::StatusOr<std::vector<double>> Read() = 0;
};

// The host's steady clock, read after `wait` (a backend's Synchronize)
// returns.
class HostClock : public DeviceClock {
 public:
  explicit HostClock(std::function<absl::Status()> wait)
      : wait_(std::move(wait)) {}

  absl::Status Mark() override {
    if (absl::Status s = wait_(); !s.ok()) return s;
    marks_.push_back(std::chrono::steady_clock::now());
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<double>> Read() override {
    std::vector<double> ms;
    for (const auto& t : marks_) {
      ms.push_back(
          std::chrono::duration<double, std::milli>(t - marks_[0]).count());
    }
    return ms;
  }

 private:
  std::function<absl::Status()> wait_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace octet
