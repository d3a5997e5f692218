// Options shared by the CPU kernels' public entry points.
#pragma once

#include "absl/status/status.h"
#include "kernels/cpu/cpu_features.h"

namespace octet {

struct CpuKernelOptions {
  // Instruction-set level; kAuto picks the best one this CPU supports. A
  // level the CPU lacks is an error (FailedPrecondition), never a crash.
  CpuIsa isa = CpuIsa::kAuto;
  // Threads to use; 0 means OpenMP's default (one per core, or
  // OMP_NUM_THREADS).
  int num_threads = 0;
  // The CPU backend packs bfloat16 and e4m3 linear weights into panels at
  // load (Backend::LayOutWeight) where the level is AVX-512: the
  // outer-product GEMMs. false: it keeps rows and the dot-product kernels,
  // for measuring the two side by side.
  bool panels = true;
};

namespace cpu_internal {

// Resolves options.isa and checks it and num_threads; `what` names the caller
// in the error message.
absl::StatusOr<CpuIsa> CheckOptions(const CpuKernelOptions& options,
                                    const char* what);

// The thread count to hand to OpenMP (never 0).
int ThreadCount(const CpuKernelOptions& options);

}  // namespace cpu_internal
}  // namespace octet
