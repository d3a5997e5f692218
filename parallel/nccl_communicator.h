// The NCCL communicator: one GPU per rank, collectives on the rank's
// compute stream (docs/design.md). Built with the CUDA backend
// (OCTET_HAVE_CUDA).
//
// The group connects through the rendezvous store (rank 0 publishes NCCL's
// unique id). The communicator is non-blocking underneath: initialization
// and every collective are polled against the timeout, and a group that
// does not complete in time is aborted with DeadlineExceeded rather than
// left hanging. Each collective returns once it has completed on the stream
// (data: device memory). Max follows NCCL's float max; the FP8 absmax it
// serves is never NaN.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/communicator.h"
#include "parallel/store.h"

namespace octet {

struct NcclOptions {
  std::string group = "octet";    // key prefix in the store
  int device = 0;                 // this rank's GPU
  cudaStream_t stream = nullptr;  // the compute stream (null: default)
  absl::Duration timeout = absl::Seconds(60);
};

absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(
    KeyValueStore& store, int rank, int size, const NcclOptions& options);

}  // namespace octet
