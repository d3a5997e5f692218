// Plain CUDA GEMMs for the shapes cuBLASLt's FP8 and BF16 kernels reject
// (odd K or N, unaligned pointers): slow, obviously correct, and the
// device-side twin of the CPU scalar kernels.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_fallback.h"
#include "kernels/gemm_args.h"

namespace octet {
namespace {

__device__ inline float Value(uint8_t code) {
  __nv_fp8_e4m3 v;
  v.__x = code;
  return static_cast<float>(v);
}
__device__ inline float Value(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void GemmFallbackKernel(const T* __restrict__ a,
                                   const T* __restrict__ b,
                                   const float* scale_a, const float* scale_b,
                                   int64_t m, int64_t n, int64_t k, bool y_bf16,
                                   void* y) {
  const int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (col >= n) return;
  const float scale = (scale_a && scale_b) ? *scale_a * *scale_b : 1.0f;
  const T* w = b + col * k;
  for (int64_t row = blockIdx.y; row < m; row += gridDim.y) {
    const T* x = a + row * k;
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) acc = fmaf(Value(x[i]), Value(w[i]), acc);
    const float v = acc * scale;
    if (y_bf16) {
      static_cast<__nv_bfloat16*>(y)[row * n + col] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(y)[row * n + col] = v;
    }
  }
}

template <typename T>
absl::Status Launch(const T* a, const T* b, const float* sa, const float* sb,
                    int64_t m, int64_t n, int64_t k, void* y, DType y_dtype,
                    cudaStream_t stream, const char* what) {
  absl::Status args = CheckGemmArgs(a, b, m, n, k, y, y_dtype, what);
  if (!args.ok()) return args;
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {  // an empty sum: Y = 0
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(y, 0, m * n * DTypeSize(y_dtype), stream));
    return absl::OkStatus();
  }
  constexpr int kThreads = 128;
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                  static_cast<unsigned>(m < 65535 ? m : 65535));
  GemmFallbackKernel<<<grid, kThreads, 0, stream>>>(a, b, sa, sb, m, n, k,
                                                    y_dtype == DType::kBf16, y);
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

__global__ void ScaleRowGroupsKernel(const float* acc, int64_t m, int64_t n,
                                     const float* __restrict__ scale_a,
                                     const int32_t* __restrict__ row_group,
                                     const float* __restrict__ scale_b,
                                     bool b_per_column, bool y_bf16, void* y) {
  const int64_t total = m * n;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int32_t g = row_group == nullptr ? 0 : row_group[i / n];
    const float scale = scale_a[g] * scale_b[b_per_column ? i % n : 0];
    const float v = acc[i] * scale;
    if (y_bf16) {
      static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(y)[i] = v;
    }
  }
}

}  // namespace

__global__ void RowScalesKernel(const float* __restrict__ scale_a,
                                const int32_t* __restrict__ row_group,
                                const float* __restrict__ scale_b, int64_t m,
                                float* __restrict__ out) {
  for (int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; r < m;
       r += int64_t{gridDim.x} * blockDim.x) {
    // ScaleRowGroupsKernel's scale
    out[r] = scale_a[row_group == nullptr ? 0 : row_group[r]] * *scale_b;
  }
}

absl::Status CudaRowScales(const float* d_scale_a, const int32_t* d_row_group,
                           const float* d_scale_b, int64_t m, float* out,
                           cudaStream_t stream) {
  if (m < 0 || (m > 0 && (d_scale_a == nullptr || d_scale_b == nullptr ||
                          out == nullptr))) {
    return absl::InvalidArgumentError(
        "CudaRowScales: negative rows or null operand");
  }
  if (m == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks =
      std::min<int64_t>((m + kThreads - 1) / kThreads, int64_t{1} << 16);
  RowScalesKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      d_scale_a, d_row_group, d_scale_b, m, out);
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CudaScaleRowGroups(const float* acc, int64_t m, int64_t n,
                                const float* d_scale_a,
                                const int32_t* d_row_group,
                                const float* d_scale_b, bool b_per_column,
                                void* y, DType y_dtype, cudaStream_t stream) {
  if (m < 0 || n < 0 ||
      (m > 0 && n > 0 &&
       (acc == nullptr || d_scale_a == nullptr || d_scale_b == nullptr ||
        y == nullptr)) ||
      (y_dtype != DType::kF32 && y_dtype != DType::kBf16)) {
    return absl::InvalidArgumentError(
        "CudaScaleRowGroups: bad shape, output type or null operand");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks =
      std::min<int64_t>((m * n + kThreads - 1) / kThreads, int64_t{1} << 16);
  ScaleRowGroupsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      acc, m, n, d_scale_a, d_row_group, d_scale_b, b_per_column,
      y_dtype == DType::kBf16, y);
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CudaGemmE4m3Fallback(const uint8_t* qa, const float* d_scale_a,
                                  const uint8_t* qb, const float* d_scale_b,
                                  int64_t m, int64_t n, int64_t k, void* y,
                                  DType y_dtype, cudaStream_t stream) {
  if (d_scale_a == nullptr || d_scale_b == nullptr) {
    return absl::InvalidArgumentError(
        "CudaGemmE4m3Fallback: null scale pointer");
  }
  return Launch(qa, qb, d_scale_a, d_scale_b, m, n, k, y, y_dtype, stream,
                "CudaGemmE4m3Fallback");
}

absl::Status CudaGemmBf16Fallback(const Bf16* a, const Bf16* b, int64_t m,
                                  int64_t n, int64_t k, void* y, DType y_dtype,
                                  cudaStream_t stream) {
  return Launch(reinterpret_cast<const __nv_bfloat16*>(a),
                reinterpret_cast<const __nv_bfloat16*>(b), nullptr, nullptr, m,
                n, k, y, y_dtype, stream, "CudaGemmBf16Fallback");
}

}  // namespace octet
