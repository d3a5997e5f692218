// Test helpers for a client of a running coordinator.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "octet/v1/generation.grpc.pb.h"

namespace octet::testing {

// Waits until the coordinator answers GetModelInfo (UNAVAILABLE while its
// workers load); false if it does not within `limit`.
inline bool WaitUntilServing(v1::Generation::Stub& stub, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    grpc::ClientContext context;
    v1::ModelInfo info;
    if (stub.GetModelInfo(&context, {}, &info).ok()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

}  // namespace octet::testing
