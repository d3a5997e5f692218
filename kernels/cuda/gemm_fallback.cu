// Plain CUDA GEMMs for the shapes cuBLASLt's FP8 and BF16 kernels reject
// (odd K or N, unaligned pointers): slow, obviously correct, and the
// device-side twin of the CPU scalar kernels. Also the GEMMs' epilogues:
// scaling rows after a binary32 product, and TreeSum (kernels/tree_sum.h).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
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

// y[batch][m][n]: one thread per output column, grid.y rows, grid.z batch
// entries (K blocks: entry b reads columns [b·k, (b + 1)·k) of a and b's
// rows, which are `ld` elements apart). K order, binary32, one fmaf a term.
template <typename T>
__global__ void GemmFallbackKernel(const T* __restrict__ a,
                                   const T* __restrict__ b,
                                   const float* scale_a, const float* scale_b,
                                   int64_t m, int64_t n, int64_t k, int64_t ld,
                                   bool y_bf16, void* y) {
  const int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (col >= n) return;
  const int64_t batch = blockIdx.z;
  const float scale = (scale_a && scale_b) ? *scale_a * *scale_b : 1.0f;
  const T* w = b + col * ld + batch * k;
  for (int64_t row = blockIdx.y; row < m; row += gridDim.y) {
    const T* x = a + row * ld + batch * k;
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) acc = fmaf(Value(x[i]), Value(w[i]), acc);
    const float v = acc * scale;
    const int64_t at = (batch * m + row) * n + col;
    if (y_bf16) {
      static_cast<__nv_bfloat16*>(y)[at] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(y)[at] = v;
    }
  }
}

template <typename T>
void LaunchGemmFallback(const T* a, const T* b, const float* sa,
                        const float* sb, int64_t m, int64_t n, int64_t k,
                        int64_t ld, int64_t batch, bool y_bf16, void* y,
                        cudaStream_t stream) {
  constexpr int kThreads = 128;
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                  static_cast<unsigned>(m < 65535 ? m : 65535),
                  static_cast<unsigned>(batch));
  GemmFallbackKernel<<<grid, kThreads, 0, stream>>>(a, b, sa, sb, m, n, k, ld,
                                                    y_bf16, y);
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
  LaunchGemmFallback(a, b, sa, sb, m, n, k, k, 1, y_dtype == DType::kBf16, y,
                     stream);
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// kernels/tree_sum.h's TreeSum of element i of `count` vectors `stride`
// apart: the same additions in the same order (pairwise, strides doubling).
__device__ float TreeSumAt(const float* __restrict__ parts, int64_t count,
                           int64_t stride, int64_t i) {
  float v[kMaxTreeSumParts];
  for (int64_t j = 0; j < count; ++j) v[j] = parts[j * stride + i];
  for (int64_t s = 1; s < count; s *= 2) {
    for (int64_t j = 0; j + s < count; j += 2 * s) {
      v[j] = __fadd_rn(v[j], v[j + s]);
    }
  }
  return v[0];
}

// acc is `parts` vectors [m][n], added in TreeSum order first (one: as it
// is). With `add`, y[i] += the value as AddKernel adds (the value rounded to
// y's type first, the sum rounded again; __fadd_rn: never an FMA).
__global__ void ScaleRowGroupsKernel(const float* acc, int64_t parts,
                                     int64_t m, int64_t n,
                                     const float* __restrict__ scale_a,
                                     const int32_t* __restrict__ row_group,
                                     const float* __restrict__ scale_b,
                                     bool b_per_column, bool y_bf16, bool add,
                                     void* y) {
  const int64_t total = m * n;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    float v = parts == 1 ? acc[i] : TreeSumAt(acc, parts, total, i);
    if (scale_a != nullptr) {
      const int32_t g = row_group == nullptr ? 0 : row_group[i / n];
      v = __fmul_rn(v, scale_a[g] * scale_b[b_per_column ? i % n : 0]);
    }
    if (y_bf16) {
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(y);
      if (add) {
        v = __fadd_rn(__bfloat162float(out[i]),
                      __bfloat162float(__float2bfloat16_rn(v)));
      }
      out[i] = __float2bfloat16_rn(v);
    } else {
      float* out = static_cast<float*>(y);
      out[i] = add ? __fadd_rn(out[i], v) : v;
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

absl::Status CudaScaleRowGroups(const float* acc, int64_t parts, int64_t m,
                                int64_t n, const float* d_scale_a,
                                const int32_t* d_row_group,
                                const float* d_scale_b, bool b_per_column,
                                void* y, DType y_dtype, bool add,
                                cudaStream_t stream) {
  if (m < 0 || n < 0 || parts < 1 || parts > kMaxTreeSumParts ||
      (m > 0 && n > 0 &&
       (acc == nullptr || (d_scale_a != nullptr && d_scale_b == nullptr) ||
        y == nullptr || ((add || parts > 1) && y == acc))) ||
      (y_dtype != DType::kF32 && y_dtype != DType::kBf16)) {
    return absl::InvalidArgumentError(
        "CudaScaleRowGroups: bad shape, output type or null operand");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks =
      std::min<int64_t>((m * n + kThreads - 1) / kThreads, int64_t{1} << 16);
  ScaleRowGroupsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      acc, parts, m, n, d_scale_a, d_row_group, d_scale_b, b_per_column,
      y_dtype == DType::kBf16, add, y);
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

absl::Status CudaGemmBlocksFallback(const void* a, const void* b,
                                    DType in_dtype, int64_t m, int64_t n,
                                    int64_t k, int64_t ld, int64_t batch,
                                    float* y, cudaStream_t stream) {
  if (m < 0 || n < 0 || k < 0 || batch < 1 || batch > 65535 || ld < k * batch ||
      (in_dtype != DType::kE4m3 && in_dtype != DType::kBf16) ||
      (m > 0 && n > 0 && (a == nullptr || b == nullptr || y == nullptr))) {
    return absl::InvalidArgumentError(
        "CudaGemmBlocksFallback: bad shape, input type or null operand");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    OCTET_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        y, 0, static_cast<size_t>(batch * m * n) * sizeof(float), stream));
    return absl::OkStatus();
  }
  if (in_dtype == DType::kE4m3) {
    LaunchGemmFallback(static_cast<const uint8_t*>(a),
                       static_cast<const uint8_t*>(b), nullptr, nullptr, m, n,
                       k, ld, batch, false, y, stream);
  } else {
    LaunchGemmFallback(static_cast<const __nv_bfloat16*>(a),
                       static_cast<const __nv_bfloat16*>(b), nullptr, nullptr,
                       m, n, k, ld, batch, false, y, stream);
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

namespace {

// kernels/tree_sum.h's TreeSum, one thread per element: the same additions
// in the same order (pairwise, strides doubling), into out.
__global__ void TreeSumKernel(const float* __restrict__ parts, int64_t count,
                              int64_t stride, int64_t n,
                              float* __restrict__ out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = TreeSumAt(parts, count, stride, i);
  }
}

}  // namespace

absl::Status CudaTreeSum(const float* parts, int64_t count, int64_t stride,
                         int64_t n, float* out, cudaStream_t stream) {
  if (count < 1 || count > kMaxTreeSumParts || n < 0 || stride < n ||
      (n > 0 && (parts == nullptr || out == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaTreeSum: ", count, " parts of ", n, " (stride ",
                     stride, "): bad shape or null operand"));
  }
  if (n == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks =
      std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t{1} << 16);
  TreeSumKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      parts, count, stride, n, out);
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace octet
