// Memory read bandwidth and dot-product peak, measured in the benchmark's
// own run so that GEMM throughput can be printed as a share of what this
// machine's memory and arithmetic give.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace octet::bench {

// Best GB/s (1e9 bytes/s) of `reps` passes of `threads` threads summing a
// buffer of `bytes` (make it several times the last-level cache).
double CpuReadBandwidthGBps(size_t bytes, int threads, int reps);

// Which instruction a CPU peak is measured for: the GEMM kernels' dot
// product at each level.
enum class DotInstruction {
  kAvx512Bf16,  // vdpbf16ps zmm: 32 bfloat16 products into 16 binary32 lanes
  kAvx2Fma,     // vfmadd231ps ymm: 8 binary32 multiply-adds
};

// Best TFLOP/s (a multiply-add counts 2) of `reps` runs of `threads` threads
// each issuing `instruction` on 16 independent accumulators from registers,
// no memory traffic: the most any GEMM using it can reach here. The caller
// must have checked that the CPU has the instruction.
double CpuDotPeakTflops(DotInstruction instruction, int threads, int reps);

#if defined(OCTET_HAVE_CUDA)
// Best GB/s of `reps` passes of a device kernel summing `bytes` of device
// memory on the current device.
absl::StatusOr<double> CudaReadBandwidthGBps(size_t bytes, int reps);
#endif

}  // namespace octet::bench
