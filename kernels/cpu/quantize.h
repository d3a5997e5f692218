// Per-tensor float8 e4m3 quantization on the CPU (the contract in
// kernels/fp8.h and docs/design.md).
//
// The two halves are separate calls because tensor parallelism all-reduces
// the absmax between them (parallel/): AbsMax -> [all-reduce MAX] ->
// E4m3ScaleFromAbsmax -> QuantizeE4m3. QuantizeE4m3Dynamic does all three for
// one rank.
//
// Every function is thread-safe and reentrant; buffers are the caller's and
// must not overlap. n == 0 is valid. Results are identical for every CpuIsa
// and thread count.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/bf16.h"
#include "kernels/cpu/options.h"
#include "kernels/fp8.h"

namespace octet {

// fmaxf-fold of |x[i]| from 0: NaN elements are ignored, an infinity gives
// +inf, an empty or all-NaN tensor gives 0.
absl::StatusOr<float> AbsMax(const float* x, int64_t n,
                             const CpuKernelOptions& options = {});
absl::StatusOr<float> AbsMax(const Bf16* x, int64_t n,
                             const CpuKernelOptions& options = {});

// q[i] = EncodeE4m3(x[i] * inv_scale), where inv_scale is E4m3Scale::inv.
absl::Status QuantizeE4m3(const float* x, int64_t n, float inv_scale,
                          uint8_t* q, const CpuKernelOptions& options = {});
absl::Status QuantizeE4m3(const Bf16* x, int64_t n, float inv_scale, uint8_t* q,
                          const CpuKernelOptions& options = {});

// AbsMax, E4m3ScaleFromAbsmax and QuantizeE4m3 in one call; returns the scale.
absl::StatusOr<E4m3Scale> QuantizeE4m3Dynamic(
    const float* x, int64_t n, uint8_t* q,
    const CpuKernelOptions& options = {});
absl::StatusOr<E4m3Scale> QuantizeE4m3Dynamic(
    const Bf16* x, int64_t n, uint8_t* q, const CpuKernelOptions& options = {});

// x[i] = DecodeE4m3(q[i]) * scale.
absl::Status DequantizeE4m3(const uint8_t* q, int64_t n, float scale, float* x,
                            const CpuKernelOptions& options = {});

}  // namespace octet
