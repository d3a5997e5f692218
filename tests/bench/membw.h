// Memory read bandwidth, measured in the benchmark's own run so that GEMM
// throughput can be printed as a share of what this machine's memory gives.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace octet::bench {

// Best GB/s (1e9 bytes/s) of `reps` passes of `threads` threads summing a
// buffer of `bytes` (make it several times the last-level cache).
double CpuReadBandwidthGBps(size_t bytes, int threads, int reps);

#if defined(OCTET_HAVE_CUDA)
// Best GB/s of `reps` passes of a device kernel summing `bytes` of device
// memory on the current device.
absl::StatusOr<double> CudaReadBandwidthGBps(size_t bytes, int reps);
#endif

}  // namespace octet::bench
