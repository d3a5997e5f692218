// A coordinator this process starts for one command and stops after it
// (`octet perplexity --tp N`): `coordinator` from beside this program, on a
// loopback port the kernel picked, its log to stderr.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace octet {

class LocalCoordinator {
 public:
  // Starts `coordinator --port P` with `flags` (e.g. "--model=M", "--tp=3")
  // and waits until it answers a one-token request, at most `timeout`.
  // Unavailable with the exit status when it exits first.
  static absl::StatusOr<std::unique_ptr<LocalCoordinator>> Start(
      const std::vector<std::string>& flags, absl::Duration timeout);
  ~LocalCoordinator();  // SIGTERM (it drains), then waits for it

  const std::string& address() const { return address_; }

 private:
  LocalCoordinator() = default;
  pid_t pid_ = -1;
  std::string address_;  // 127.0.0.1:PORT
};

}  // namespace octet
