// The CUDA backend: bfloat16 activations on one GPU, one stream, cuBLASLt
// GEMMs (kernels/cuda/gemm.h), the quantizer (kernels/cuda/quantize.h) and
// the kernels of kernels/cuda/ops.h.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace octet {

// Fails (Unavailable) when there is no usable device `device`.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device = 0);

}  // namespace octet
