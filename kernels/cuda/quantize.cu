// CUDA float8 e4m3 quantizer kernels; see quantize.h for the design.
//
// Encoding uses __nv_cvt_float2_to_fp8x2(..., __NV_SATFINITE, __NV_E4M3),
// which on sm_89+ is the hardware cvt.rn.satfinite.e4m3x2.f32 and is the
// contract's oracle; the scale comes from the same E4m3ScaleFromAbsmax the CPU
// uses, so both backends produce identical codes and scales.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/group_quantize.cuh"
#include "kernels/cuda/quantize.h"
#include "kernels/fp8.h"

namespace octet {
namespace {

constexpr int kThreads = 256;
// Upper bound on the absmax grid (and the partials buffer).
constexpr int kMaxBlocks = 1024;
// Elements each thread handles per vector step: 16 bytes of input.
template <typename T>
constexpr int kVec = 16 / sizeof(T);

__device__ inline float ToFloat(float v) { return v; }
__device__ inline float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// Loads kVec<T> elements from 16-byte aligned p.
template <typename T>
__device__ inline void LoadVec(const T* p, float (&out)[kVec<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  if constexpr (sizeof(T) == 4) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  } else {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    AbsMaxKernel(const T* __restrict__ x, int64_t n, bool aligned,
                 float* __restrict__ partials, unsigned int* ticket,
                 float* __restrict__ out) {
  float m = 0.0f;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  const int64_t tid = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  int64_t tail_begin = 0;
  if (aligned) {
    const int64_t vectors = n / kVec<T>;
    for (int64_t v = tid; v < vectors; v += stride) {
      float vals[kVec<T>];
      LoadVec(x + v * kVec<T>, vals);
#pragma unroll
      for (float f : vals) m = fmaxf(m, fabsf(f));
    }
    tail_begin = vectors * kVec<T>;
  }
  for (int64_t i = tail_begin + tid; i < n; i += stride) {
    m = fmaxf(m, fabsf(ToFloat(x[i])));
  }
  m = BlockMax<kThreads>(m);

  __shared__ bool is_last;
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = m;
    __threadfence();  // publish the partial before taking a ticket
    is_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __threadfence();  // and, in the last block, see every other partial
  }
  __syncthreads();
  if (!is_last) return;
  float total = 0.0f;
  for (int b = threadIdx.x; b < gridDim.x; b += kThreads) {
    total = fmaxf(total, __ldcg(partials + b));
  }
  total = BlockMax<kThreads>(total);
  if (threadIdx.x == 0) {
    *out = total;
    *ticket = 0;  // ready for the next launch on this stream
  }
}

__device__ inline uint16_t EncodePair(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    QuantizeKernel(const T* __restrict__ x, int64_t n, bool aligned,
                   const float* __restrict__ absmax_or_scale, bool given_scale,
                   uint8_t* __restrict__ q, float* __restrict__ scale_out) {
  // Dynamic: the contract's scale from the absmax (and published for the
  // GEMM). Static: the given scale, inv = 1 / scale.
  const E4m3Scale s = given_scale
                          ? E4m3Scale{*absmax_or_scale, 1.0f / *absmax_or_scale}
                          : E4m3ScaleFromAbsmax(*absmax_or_scale);
  if (!given_scale && blockIdx.x == 0 && threadIdx.x == 0) *scale_out = s.scale;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  const int64_t tid = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  int64_t tail_begin = 0;
  if (aligned) {
    // 8 elements per step: one 8-byte store of codes.
    constexpr int kStep = 8;
    const int64_t steps = n / kStep;
    for (int64_t v = tid; v < steps; v += stride) {
      float vals[kStep];
      if constexpr (kVec<T> == 8) {
        LoadVec(x + v * kStep, vals);
      } else {
        float lo[4], hi[4];
        LoadVec(x + v * kStep, lo);
        LoadVec(x + v * kStep + 4, hi);
        for (int i = 0; i < 4; ++i) vals[i] = lo[i], vals[i + 4] = hi[i];
      }
      uint2 codes;
      codes.x = EncodePair(vals[0] * s.inv, vals[1] * s.inv) |
                (uint32_t{EncodePair(vals[2] * s.inv, vals[3] * s.inv)} << 16);
      codes.y = EncodePair(vals[4] * s.inv, vals[5] * s.inv) |
                (uint32_t{EncodePair(vals[6] * s.inv, vals[7] * s.inv)} << 16);
      *reinterpret_cast<uint2*>(q + v * kStep) = codes;
    }
    tail_begin = steps * kStep;
  }
  for (int64_t i = tail_begin + tid; i < n; i += stride) {
    q[i] =
        __nv_cvt_float_to_fp8(ToFloat(x[i]) * s.inv, __NV_SATFINITE, __NV_E4M3);
  }
}

// A row of x in memory, as binary32.
template <typename T>
struct MemoryRow {
  const T* __restrict__ x;
  __device__ float operator()(int64_t c) const { return ToFloat(x[c]); }
};
// Row r of x [*][cols] (GroupQuantizeGridKernel's rows).
template <typename T>
struct MemoryRows {
  const T* x;
  int64_t cols;
  __device__ MemoryRow<T> operator()(int64_t r) const {
    return MemoryRow<T>{x + r * cols};
  }
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    GroupAbsMaxKernel(const T* __restrict__ x, int64_t cols,
                      const int32_t* __restrict__ row_group,
                      float* __restrict__ absmax) {
  GroupAbsMaxRow<kThreads>(MemoryRow<T>{x + blockIdx.x * cols}, blockIdx.x,
                           cols, row_group, absmax);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    GroupQuantizeKernel(const T* __restrict__ x, int64_t cols,
                        const int32_t* __restrict__ row_group,
                        const float* __restrict__ absmax,
                        uint8_t* __restrict__ q, float* __restrict__ scale) {
  GroupQuantizeRow<kThreads>(MemoryRow<T>{x + blockIdx.x * cols}, blockIdx.x,
                             cols, row_group, absmax, q, scale);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    OwnGroupQuantizeKernel(const T* __restrict__ x, int64_t cols,
                           float* __restrict__ absmax, uint8_t* __restrict__ q,
                           float* __restrict__ scale) {
  OwnGroupQuantizeRow<kThreads>(MemoryRow<T>{x + blockIdx.x * cols}, cols,
                                absmax, q, scale);
}

template <typename Y>
__global__ void DequantizeKernel(const uint8_t* __restrict__ q, int64_t n,
                                 const float* __restrict__ scale,
                                 Y* __restrict__ y) {
  const float s = *scale;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    __nv_fp8_e4m3 code;
    code.__x = q[i];
    const float v = static_cast<float>(code) * s;
    if constexpr (sizeof(Y) == 4) {
      y[i] = v;
    } else {
      y[i] = __float2bfloat16_rn(v);
    }
  }
}

bool Aligned16(const void* p, const void* q = nullptr) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(q) % 16 == 0;
}

absl::Status CheckInput(const void* x, DType x_dtype, int64_t n,
                        const char* what) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": element count must be >= 0, got ", n));
  }
  if (x_dtype != DType::kF32 && x_dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": input must be f32 or bf16, got ", DTypeName(x_dtype)));
  }
  if (n > 0 && x == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null input"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaE4m3Quantizer>> CudaE4m3Quantizer::Create() {
  std::unique_ptr<CudaE4m3Quantizer> qz(new CudaE4m3Quantizer());
  int device = 0;
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  OCTET_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &qz->sm_count_, cudaDevAttrMultiProcessorCount, device));
  qz->max_blocks_ = kMaxBlocks;
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&qz->partials_, sizeof(float) * qz->max_blocks_));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&qz->ticket_, sizeof(unsigned int)));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&qz->absmax_, sizeof(float)));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemset(qz->ticket_, 0, sizeof(unsigned int)));
  return qz;
}

CudaE4m3Quantizer::~CudaE4m3Quantizer() {
  cudaFree(partials_);
  cudaFree(ticket_);
  cudaFree(absmax_);
}

absl::Status CudaE4m3Quantizer::AbsMax(const void* x, DType x_dtype, int64_t n,
                                       float* d_absmax, cudaStream_t stream) {
  absl::Status input = CheckInput(x, x_dtype, n, "CudaE4m3Quantizer::AbsMax");
  if (!input.ok()) return input;
  if (d_absmax == nullptr) {
    return absl::InvalidArgumentError("CudaE4m3Quantizer::AbsMax: null output");
  }
  // Enough blocks to fill the GPU a few times over, never more than the
  // work (8 elements per thread) or the partials buffer.
  const int64_t work_blocks = (n + kThreads * 8 - 1) / (kThreads * 8);
  const int blocks = static_cast<int>(std::clamp<int64_t>(
      work_blocks, 1, std::min(max_blocks_, 4 * sm_count_)));
  if (x_dtype == DType::kBf16) {
    AbsMaxKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), n, Aligned16(x), partials_,
        ticket_, d_absmax);
  } else {
    AbsMaxKernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(x),
                                                  n, Aligned16(x), partials_,
                                                  ticket_, d_absmax);
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CudaE4m3Quantizer::Quantize(const void* x, DType x_dtype,
                                         int64_t n, const float* d_absmax,
                                         uint8_t* q, float* d_scale,
                                         cudaStream_t stream) {
  if (d_scale == nullptr) {
    return absl::InvalidArgumentError(
        "CudaE4m3Quantizer::Quantize: null scale output");
  }
  return Launch(x, x_dtype, n, d_absmax, /*given_scale=*/false, q, d_scale,
                stream);
}

absl::Status CudaE4m3Quantizer::QuantizeWithScale(const void* x, DType x_dtype,
                                                  int64_t n,
                                                  const float* d_scale,
                                                  uint8_t* q,
                                                  cudaStream_t stream) {
  return Launch(x, x_dtype, n, d_scale, /*given_scale=*/true, q, nullptr,
                stream);
}

absl::Status CudaE4m3Quantizer::Launch(const void* x, DType x_dtype, int64_t n,
                                       const float* d_in, bool given_scale,
                                       uint8_t* q, float* d_scale,
                                       cudaStream_t stream) {
  absl::Status input = CheckInput(x, x_dtype, n, "CudaE4m3Quantizer::Quantize");
  if (!input.ok()) return input;
  if ((n > 0 && q == nullptr) || d_in == nullptr) {
    return absl::InvalidArgumentError(
        "CudaE4m3Quantizer::Quantize: null output, absmax or scale");
  }
  const int64_t work_blocks = (n + kThreads * 8 - 1) / (kThreads * 8);
  const int blocks = static_cast<int>(
      std::clamp<int64_t>(work_blocks, 1, int64_t{32} * sm_count_));
  // The vector path needs 16-byte aligned input and 8-byte aligned codes.
  const bool aligned = Aligned16(x) && reinterpret_cast<uintptr_t>(q) % 8 == 0;
  if (x_dtype == DType::kBf16) {
    QuantizeKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), n, aligned, d_in, given_scale, q,
        d_scale);
  } else {
    QuantizeKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const float*>(x), n, aligned, d_in, given_scale, q,
        d_scale);
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

namespace {

absl::Status CheckGroups(const void* x, DType x_dtype, int64_t rows,
                         int64_t cols, const int32_t* d_row_group,
                         int64_t groups, const void* out, const char* what) {
  absl::Status input = CheckInput(x, x_dtype, rows * cols, what);
  if (!input.ok()) return input;
  if (rows < 0 || cols < 0 || groups < 1 || groups > rows ||
      rows > std::numeric_limits<int32_t>::max() ||
      (groups > 1 && d_row_group == nullptr) || out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", groups, " groups over ", rows, " rows of ", cols,
        " (need 1 <= groups <= rows < 2^31, a row map for several groups "
        "and an output)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaE4m3Quantizer::GroupAbsMax(const void* x, DType x_dtype,
                                            int64_t rows, int64_t cols,
                                            const int32_t* d_row_group,
                                            int64_t groups, float* d_absmax,
                                            cudaStream_t stream) {
  absl::Status args = CheckGroups(x, x_dtype, rows, cols, d_row_group, groups,
                                  d_absmax, "CudaE4m3Quantizer::GroupAbsMax");
  if (!args.ok()) return args;
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(d_absmax, 0, groups * sizeof(float), stream));
  const unsigned blocks = static_cast<unsigned>(rows);
  if (x_dtype == DType::kBf16) {
    GroupAbsMaxKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), cols, d_row_group, d_absmax);
  } else {
    GroupAbsMaxKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const float*>(x), cols, d_row_group, d_absmax);
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CudaE4m3Quantizer::GroupQuantize(
    const void* x, DType x_dtype, int64_t rows, int64_t cols,
    const int32_t* d_row_group, int64_t groups, const float* d_absmax,
    uint8_t* q, float* d_scale, cudaStream_t stream) {
  const char* what = "CudaE4m3Quantizer::GroupQuantize";
  absl::Status args =
      CheckGroups(x, x_dtype, rows, cols, d_row_group, groups, d_scale, what);
  if (!args.ok()) return args;
  if (d_absmax == nullptr || (cols > 0 && q == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null absmax or codes"));
  }
  const unsigned blocks = static_cast<unsigned>(rows);
  if (x_dtype == DType::kBf16) {
    GroupQuantizeKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), cols, d_row_group, d_absmax, q,
        d_scale);
  } else {
    GroupQuantizeKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const float*>(x), cols, d_row_group, d_absmax, q, d_scale);
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CudaE4m3Quantizer::QuantizeOwnRows(const void* x, DType x_dtype,
                                                int64_t rows, int64_t cols,
                                                float* d_absmax, uint8_t* q,
                                                float* d_scale,
                                                cudaStream_t stream) {
  const char* what = "CudaE4m3Quantizer::QuantizeOwnRows";
  absl::Status input = CheckInput(x, x_dtype, rows * cols, what);
  if (!input.ok()) return input;
  if (rows < 0 || cols < 0 || rows > std::numeric_limits<int32_t>::max() ||
      (rows > 0 && (d_absmax == nullptr || d_scale == nullptr)) ||
      (rows * cols > 0 && q == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", rows, " rows of ", cols,
        " (need rows < 2^31, an absmax, a scale and codes)"));
  }
  if (rows == 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>(rows);
  if (x_dtype == DType::kBf16) {
    OwnGroupQuantizeKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), cols, d_absmax, q, d_scale);
  } else {
    OwnGroupQuantizeKernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<const float*>(x), cols, d_absmax, q, d_scale);
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CudaE4m3Quantizer::QuantizeGroups(
    const void* x, DType x_dtype, int64_t rows, int64_t cols,
    const int32_t* d_row_group, int64_t groups, float* d_absmax, uint8_t* q,
    float* d_scale, cudaStream_t stream) {
  absl::Status args =
      CheckGroups(x, x_dtype, rows, cols, d_row_group, groups, d_absmax,
                  "CudaE4m3Quantizer::QuantizeGroups");
  if (!args.ok()) return args;
  if (d_scale == nullptr || (rows * cols > 0 && q == nullptr)) {
    return absl::InvalidArgumentError(
        "CudaE4m3Quantizer::QuantizeGroups: null codes or scales");
  }
  const cudaError_t e =
      x_dtype == DType::kBf16
          ? LaunchGroupQuantizeGrid<kThreads>(
                MemoryRows<__nv_bfloat16>{
                    static_cast<const __nv_bfloat16*>(x), cols},
                rows, cols, d_row_group, groups, d_absmax, q, d_scale, stream)
          : LaunchGroupQuantizeGrid<kThreads>(
                MemoryRows<float>{static_cast<const float*>(x), cols}, rows,
                cols, d_row_group, groups, d_absmax, q, d_scale, stream);
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // a refused launch leaves nothing behind
  if (!CooperativeRefused(e)) {
    return absl::InternalError(absl::StrCat(
        "CudaE4m3Quantizer::QuantizeGroups: ", cudaGetErrorString(e)));
  }
  SayCooperativeRefusedOnce(e);
  OCTET_RETURN_IF_ERROR(GroupAbsMax(x, x_dtype, rows, cols, d_row_group,
                                    groups, d_absmax, stream));
  return GroupQuantize(x, x_dtype, rows, cols, d_row_group, groups, d_absmax, q,
                       d_scale, stream);
}

absl::Status CudaE4m3Quantizer::QuantizeRowGroups(
    const void* x, DType x_dtype, int64_t rows, int64_t cols,
    const int32_t* d_row_group, int64_t groups, float* d_absmax, uint8_t* q,
    float* d_scale, cudaStream_t stream) {
  if (groups == rows) {  // a block per row
    return QuantizeOwnRows(x, x_dtype, rows, cols, d_absmax, q, d_scale,
                           stream);
  }
  if (groups == 1) {  // one tensor: two launches, no memset
    OCTET_RETURN_IF_ERROR(AbsMax(x, x_dtype, rows * cols, d_absmax, stream));
    return Quantize(x, x_dtype, rows * cols, d_absmax, q, d_scale, stream);
  }
  return QuantizeGroups(x, x_dtype, rows, cols, d_row_group, groups, d_absmax,
                        q, d_scale, stream);  // a cooperative grid
}

absl::Status CudaE4m3Quantizer::QuantizeDynamic(const void* x, DType x_dtype,
                                                int64_t n, uint8_t* q,
                                                float* d_scale,
                                                cudaStream_t stream) {
  absl::Status s = AbsMax(x, x_dtype, n, absmax_, stream);
  if (!s.ok()) return s;
  return Quantize(x, x_dtype, n, absmax_, q, d_scale, stream);
}

absl::Status CudaE4m3Quantizer::Dequantize(const uint8_t* q, int64_t n,
                                           const float* d_scale, void* y,
                                           DType y_dtype, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (q == nullptr || y == nullptr)) ||
      d_scale == nullptr) {
    return absl::InvalidArgumentError(
        "CudaE4m3Quantizer::Dequantize: bad count or null buffer");
  }
  if (n == 0) return absl::OkStatus();
  const int blocks = static_cast<int>(std::clamp<int64_t>(
      (n + kThreads - 1) / kThreads, 1, int64_t{32} * sm_count_));
  if (y_dtype == DType::kF32) {
    DequantizeKernel<<<blocks, kThreads, 0, stream>>>(q, n, d_scale,
                                                      static_cast<float*>(y));
  } else if (y_dtype == DType::kBf16) {
    DequantizeKernel<<<blocks, kThreads, 0, stream>>>(
        q, n, d_scale, static_cast<__nv_bfloat16*>(y));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaE4m3Quantizer::Dequantize: output must be f32 or bf16, got ",
        DTypeName(y_dtype)));
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace octet
