// The NCCL communicator: one GPU per rank, collectives on the rank's
// compute stream (docs/design.md). Built with the CUDA backend
// (OCTET_HAVE_CUDA).
//
// The group connects through the rendezvous store (rank 0 publishes NCCL's
// unique id). The communicator is non-blocking underneath, and every
// collective is enqueued on the stream and returns without waiting for it
// to run (so collectives can be captured in the decode graphs: capturable()).
// Await() is where the host waits: it polls the stream and NCCL's
// asynchronous error, and aborts the group with DeadlineExceeded when the
// work has not completed within the timeout, so a dead peer fails the step
// in bounded time rather than hanging it. Initialization is polled against
// the same timeout. Max follows NCCL's float max; the FP8 absmax it serves
// is never NaN. AllReduceSum is an all-gather and a TreeSum on the device
// (kernels/cuda/gemm_fallback.h), not NCCL's sum, so that its bits are the
// CPU communicators' (Communicator's rule); its gathered values live in a
// scratch that grows to size() times the largest sum.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/communicator.h"
#include "rpc/store.h"

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
