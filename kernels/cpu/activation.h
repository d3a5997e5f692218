// Elementwise activations on the CPU as the backend runs them: the scalar
// reference (SiluMulRef, ops.h) at the scalar level, else the vectorized
// kernel of the best level (activation_kernels.h says how its bits relate
// to the reference's), rows split across threads.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cpu/options.h"

namespace octet::cpu {

// As SiluMulRef: x is [rows][2 * cols] (gate, then up), out [rows][cols],
// out = SiLU(gate) * up. FailedPrecondition for an instruction-set level
// this CPU lacks.
absl::Status SiluMul(const float* x, int64_t rows, int64_t cols, float* out,
                     const CpuKernelOptions& options);

}  // namespace octet::cpu
