// How a rank joins its tensor-parallel group: NCCL for GPU ranks that ask
// for it (one GPU each, on the backend's own stream), else shared memory or
// Gloo, staged through host memory when the rank computes on a GPU (so that
// several ranks may share one GPU, which NCCL refuses). The worker's Load and
// the tests' rank processes (tests/worker/tp_rank.cc) both join this way.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/backend.h"
#include "parallel/communicator.h"
#include "rpc/store.h"

namespace octet {

struct TpGroup {
  int rank = 0, size = 1;
  std::string name;   // the group's key prefix in the store
  bool nccl = false;  // else `transport`
  CpuTransport transport = CpuTransport::kShm;
  int cuda_device = 0;  // with nccl: this rank's GPU
  absl::Duration timeout = absl::Seconds(60);
  std::string collective_host = "127.0.0.1";  // where Gloo peers reach it
};

// InvalidArgument for nccl on a rank that does not compute on CUDA (checked
// by JoinTpGroup, and by a worker before it knows whether it has peers).
absl::Status CheckTpTransport(const Backend& backend, bool nccl);

// This rank's communicator in `group`, through `store`, for data in
// `backend`'s memory. Unimplemented for nccl in a build without NCCL.
absl::StatusOr<std::unique_ptr<Communicator>> JoinTpGroup(KeyValueStore& store,
                                                          Backend& backend,
                                                          const TpGroup& group);

}  // namespace octet
