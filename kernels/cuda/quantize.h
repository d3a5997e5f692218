// Per-tensor float8 e4m3 quantization on a CUDA device: the same contract,
// and the same codes bit for bit, as kernels/cpu/quantize.h.
//
// Two kernels and no host round trip:
//   1. AbsMax: one pass over x; each block reduces its part, and the last
//      block to finish (an atomic ticket) folds the per-block maxima and
//      writes the absmax to device memory.
//   2. Quantize: reads that absmax on the device, computes the scale with
//      E4m3ScaleFromAbsmax (kernels/fp8.h, shared with the CPU), writes the
//      scale for the GEMM and the codes.
// Tensor parallelism all-reduces the absmax (in device memory) between 1 and
// 2; QuantizeDynamic runs both for one rank.
//
// Inputs are bf16 or f32 device arrays of any length and alignment (16-byte
// aligned ones take the vectorized path).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace octet {

class CudaE4m3Quantizer {
 public:
  // Allocates the reduction scratch on the current device.
  static absl::StatusOr<std::unique_ptr<CudaE4m3Quantizer>> Create();
  ~CudaE4m3Quantizer();
  CudaE4m3Quantizer(const CudaE4m3Quantizer&) = delete;
  CudaE4m3Quantizer& operator=(const CudaE4m3Quantizer&) = delete;

  // *d_absmax = fmaxf-fold of |x| (NaN ignored, 0 for n == 0).
  absl::Status AbsMax(const void* x, DType x_dtype, int64_t n, float* d_absmax,
                      cudaStream_t stream);

  // *d_scale = E4m3ScaleFromAbsmax(*d_absmax).scale and
  // q[i] = EncodeE4m3(x[i] * inv), with inv computed on the device.
  absl::Status Quantize(const void* x, DType x_dtype, int64_t n,
                        const float* d_absmax, uint8_t* q, float* d_scale,
                        cudaStream_t stream);

  // q[i] = EncodeE4m3(x[i] * (1 / *d_scale)) for a static activation scale.
  absl::Status QuantizeWithScale(const void* x, DType x_dtype, int64_t n,
                                 const float* d_scale, uint8_t* q,
                                 cudaStream_t stream);

  // One scale per group of consecutive rows of x ([rows][cols]; RowGroups
  // in kernels/backend.h, d_row_group device [rows]): the per-sequence
  // activation scales of a batched forward pass.
  // d_absmax[g] = fmaxf-fold of |x| over the rows of group g.
  absl::Status GroupAbsMax(const void* x, DType x_dtype, int64_t rows,
                           int64_t cols, const int32_t* d_row_group,
                           int64_t groups, float* d_absmax,
                           cudaStream_t stream);
  // Rows of group g: as Quantize with d_absmax[g]; d_scale[g] receives the
  // scale.
  absl::Status GroupQuantize(const void* x, DType x_dtype, int64_t rows,
                             int64_t cols, const int32_t* d_row_group,
                             int64_t groups, const float* d_absmax, uint8_t* q,
                             float* d_scale, cudaStream_t stream);

  // GroupAbsMax then GroupQuantize, bit for bit, where every row is its own
  // group: one kernel, a block per row (the absmax from the block's own
  // reduction, then the codes); d_absmax[r] and d_scale[r] receive row r's.
  absl::Status QuantizeOwnRows(const void* x, DType x_dtype, int64_t rows,
                               int64_t cols, float* d_absmax, uint8_t* q,
                               float* d_scale, cudaStream_t stream);

  // GroupAbsMax then GroupQuantize, bit for bit, for any groups (d_row_group
  // may be null for one): one cooperative launch (group_quantize.cuh), or
  // the two calls where the device refuses cooperative launches.
  absl::Status QuantizeGroups(const void* x, DType x_dtype, int64_t rows,
                              int64_t cols, const int32_t* d_row_group,
                              int64_t groups, float* d_absmax, uint8_t* q,
                              float* d_scale, cudaStream_t stream);

  // GroupAbsMax then GroupQuantize, bit for bit, the fastest way this
  // quantizer has for the groups: QuantizeOwnRows where each row is its
  // own group, the whole-tensor AbsMax and Quantize (16-byte loads) for
  // one group, else QuantizeGroups. What CudaBackend::QuantizeGroups runs
  // for an input in memory (and bench_gemm times).
  absl::Status QuantizeRowGroups(const void* x, DType x_dtype, int64_t rows,
                                 int64_t cols, const int32_t* d_row_group,
                                 int64_t groups, float* d_absmax, uint8_t* q,
                                 float* d_scale, cudaStream_t stream);

  // AbsMax then Quantize, through an absmax slot owned by this object.
  absl::Status QuantizeDynamic(const void* x, DType x_dtype, int64_t n,
                               uint8_t* q, float* d_scale, cudaStream_t stream);

  // y[i] = DecodeE4m3(q[i]) * (*d_scale), stored as y_dtype (f32 or bf16).
  absl::Status Dequantize(const uint8_t* q, int64_t n, const float* d_scale,
                          void* y, DType y_dtype, cudaStream_t stream);

 private:
  CudaE4m3Quantizer() = default;
  absl::Status Launch(const void* x, DType x_dtype, int64_t n,
                      const float* d_in, bool given_scale, uint8_t* q,
                      float* d_scale, cudaStream_t stream);

  // Device scratch: per-block maxima, the last-block ticket (always 0
  // between calls) and the absmax slot of QuantizeDynamic.
  float* partials_ = nullptr;
  unsigned int* ticket_ = nullptr;
  float* absmax_ = nullptr;
  int max_blocks_ = 0;
  int sm_count_ = 0;
};

// Thread-safety: one quantizer serves one stream at a time (its scratch is
// shared by the calls). Create one per stream or serialize the calls.

}  // namespace octet
