// The CUDA backend: bfloat16 activations on one GPU, one stream, cuBLASLt
// GEMMs (kernels/cuda/gemm.h), the quantizer (kernels/cuda/quantize.h), the
// kernels of kernels/cuda/ops.h (attention: attention_plan.h) and the
// sampler (kernels/cuda/sampling.h). Every call first makes its GPU the
// calling thread's device; small host-to-device copies go through a pinned
// double buffer; work is captured as CUDA graphs (Backend::BeginCapture),
// and scratch that captured work may name is kept while the backend lives.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace octet {

// Fails (Unavailable) when there is no usable device `device`.
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device = 0);

}  // namespace octet
