// Collectives over a backend's device memory through a communicator of host
// memory (shared memory or Gloo): each call copies its data to host staging
// (Backend::CopyToHost, which waits for the kernels that made it), runs the
// host collective there, and copies the result back (Backend::CopyToDevice,
// ordered before the kernels that read it).
//
// Why: NCCL refuses two ranks on one GPU, and most test machines have one.
// Staged, TP = 2 and 4 run on a single GPU (`--transport shm` with CUDA
// ranks), for tests and small models; it costs two copies and a host wait
// per collective, so NCCL remains the way between GPUs. With the CPU
// backend the "device" is host memory and staging is a copy: that is how
// it is tested without a GPU (tests/parallel/communicator_test.cc).
//
// Same rules as every Communicator (parallel/communicator.h); `data` is
// the backend's memory. Its sums are the host communicator's (TreeSum order
// over the ranks; bfloat16 widened, summed in binary32, rounded once).
#pragma once

#include <memory>

#include "kernels/backend.h"
#include "parallel/communicator.h"

namespace octet {

// `backend` must outlive the communicator.
std::unique_ptr<Communicator> NewStagedCommunicator(
    Backend& backend, std::unique_ptr<Communicator> host);

}  // namespace octet
