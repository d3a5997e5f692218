// Turns checkpoint tensors into device weights for one backend: linear
// layers (fused, and FP8-quantized at load when asked), embedding tables and
// norm weights.
//
// FP8 (docs/design.md): a fused projection (QKV, gate_up) is one weight
// with one per-tensor scale. From a BF16/F16/F32 checkpoint the scale comes
// from the absmax of all its parts; from an FP8 checkpoint whose parts carry
// different weight_scales, every part is requantized to the largest one
// (parts already at it keep their codes), and static input_scales fuse to
// their maximum too.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cpu/options.h"
#include "model/checkpoint.h"

namespace octet {

enum class LinearMethod {
  kNone,  // weights as in the checkpoint (bfloat16 on CUDA)
  kFp8,   // e4m3 weights, per-tensor scales, e4m3 activations
};

struct WeightPolicy {
  LinearMethod method = LinearMethod::kNone;
  // FP8 from float weights, tensor parallelism with global weight scales:
  // all-reduces (MAX) a fused weight's absmax across the ranks, so that every
  // rank quantizes its slice with the scale TP=1 would use. Unset: the
  // slice's own absmax (`local`).
  std::function<absl::Status(float* absmax)> reduce_absmax;
  // Unquantized weights on this backend: binary32 and bfloat16 kept as they
  // are (CPU), or everything as bfloat16 (CUDA). Binary16 becomes binary32
  // on the CPU.
  bool bf16_only = false;
  CpuKernelOptions cpu;  // for load-time quantization on the host
};

// The part of a (fused) weight a tensor-parallel rank holds: rows [first,
// second) of each part (empty: every row of every part) and input columns
// [col_begin, col_end) (col_end < 0: all). Only the slice is read.
struct WeightSlice {
  std::vector<std::pair<int64_t, int64_t>> rows;
  int64_t col_begin = 0, col_end = -1;
};

// The rows of `parts` (each [rows_i][in]), sliced, stacked into one weight.
absl::StatusOr<LinearWeight> LoadLinear(const Checkpoint& ckpt,
                                        const std::vector<std::string>& parts,
                                        const WeightPolicy& policy,
                                        Backend& backend,
                                        const WeightSlice& slice = {});

// A float table [rows][cols] (embeddings, lm_head) as an unquantized weight:
// bfloat16 or binary32 per the policy.
absl::StatusOr<LinearWeight> LoadTable(const Checkpoint& ckpt,
                                       const std::string& name,
                                       const WeightPolicy& policy,
                                       Backend& backend,
                                       const WeightSlice& slice = {});

// Each row of the float matrix `t` as e4m3 with its own scale (the FP8
// contract on that row's absmax): codes [rows][in], scales [rows].
absl::Status QuantizeEachRow(const TensorView& t, const CpuKernelOptions& o,
                             uint8_t* codes, float* scales);

// A float table [rows][cols] (the lm_head) as e4m3 with one scale per row
// (LinearWeight::scale_per_row): each row quantized by the FP8 contract with
// its own absmax, so that a row's codes and scale depend on that row alone
// (and not on the tensor-parallel slice).
absl::StatusOr<LinearWeight> LoadTableE4m3PerRow(const Checkpoint& ckpt,
                                                 const std::string& name,
                                                 const WeightPolicy& policy,
                                                 Backend& backend,
                                                 const WeightSlice& slice = {});

// A float vector (a norm weight) as binary32 on the device.
absl::StatusOr<DeviceBuffer> LoadVectorF32(const Checkpoint& ckpt,
                                           const std::string& name,
                                           Backend& backend);

// Float vectors (the biases of a fused projection) as one binary32 vector:
// each part's values [first, second) of slice.rows (all of them when
// slice.rows is empty), in order.
absl::StatusOr<DeviceBuffer> LoadVectorF32(
    const Checkpoint& ckpt, const std::vector<std::string>& parts,
    Backend& backend, const WeightSlice& slice = {});

// Host copies of a float tensor's values as binary32 (any float dtype).
std::vector<float> ToFloat(const TensorView& t);

}  // namespace octet
