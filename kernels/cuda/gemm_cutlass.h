// CUTLASS's FP8 GEMM for sm_90 (Hopper) with one scale per output row in
// its epilogue: CublasLtGemm's third way of applying per-sequence
// activation scales (gemm.h, RowScaling::kCutlass), beside cuBLASLt's
// outer-vector scales and the two-pass path:
//
//   y[r][c] = bfloat16(row_scale[r] · Σ_k decode(qa[r][k]) · decode(qb[c][k]))
//
// the sum in binary32 (no fast accumulation: CUTLASS promotes the tensor
// cores' partial sums), row_scale[r] the product q_scale[g] · w_scale that
// CudaRowScales writes, one rounding. The order of the sum depends on K's
// tiles, not on N: a tensor-parallel slice of the columns gets TP = 1's
// bits. One kernel (TMA loads, warp-specialized ping-pong, 64 x 128 x 128
// tiles) for every shape it serves.
//
// Built only where the CUTLASS headers are (OCTET_HAVE_CUTLASS: the pinned
// nvidia-cutlass wheel, scripts/fetch-cutlass.sh) and only for sm_90a; the
// caller asks Built() and checks the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace octet::cutlass_gemm {

// Whether this build holds the kernel, and the CUTLASS it came from
// ("4.2.0"; empty when not built).
bool Built();
const char* Version();

// Whether the kernel serves this problem: K a multiple of 16 and N of 8
// (its 16-byte loads and stores), every operand 16-byte aligned.
bool Serves(int64_t m, int64_t n, int64_t k, const void* qa, const void* qb,
            const void* y);

// The formula above, enqueued on `stream` (capturable). qa [m][k], qb
// [n][k] e4m3 codes, row_scale device [m], y bfloat16 [m][n]; `workspace`
// of `workspace_bytes` for CUTLASS's tile scheduler (an error when too
// small). FailedPrecondition, nothing enqueued, when !Built(),
// !Serves(...) or CUTLASS's can_implement refuses the problem.
absl::Status RowScaledE4m3(const uint8_t* qa, const uint8_t* qb,
                           const float* row_scale, int64_t m, int64_t n,
                           int64_t k, void* y, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream);

}  // namespace octet::cutlass_gemm
