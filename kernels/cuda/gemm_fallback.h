// Plain CUDA GEMMs, one thread per output element, binary32 accumulation in
// K order. CublasLtGemm (gemm.h) uses them for shapes cuBLASLt rejects; tests
// call them directly. Same layouts and meaning as gemm.h; the scales are
// device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/bf16.h"
#include "kernels/dtype.h"

namespace octet {

absl::Status CudaGemmE4m3Fallback(const uint8_t* qa, const float* d_scale_a,
                                  const uint8_t* qb, const float* d_scale_b,
                                  int64_t m, int64_t n, int64_t k, void* y,
                                  DType y_dtype, cudaStream_t stream);

absl::Status CudaGemmBf16Fallback(const Bf16* a, const Bf16* b, int64_t m,
                                  int64_t n, int64_t k, void* y, DType y_dtype,
                                  cudaStream_t stream);

}  // namespace octet
