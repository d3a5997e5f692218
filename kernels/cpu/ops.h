// The Llama forward's non-GEMM operations on binary32 activations: the CPU
// backend's implementation and the scalar references (*Ref) that the CUDA
// kernels are checked against (tests/kernels/cuda_ops_test.cc). Semantics as
// documented on Backend (kernels/backend.h). Thread-safe; parallel over rows
// with OpenMP when `threads` > 1.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "kernels/backend.h"

namespace octet::cpu {

void EmbeddingRef(const void* table, DType table_dtype, int64_t rows,
                  int64_t cols, int64_t row_begin, const int32_t* ids,
                  int64_t n, float* out);

void RmsNormRef(const float* x, const float* weight, int64_t rows, int64_t cols,
                float eps, float* out, int threads);

void AddRef(float* x, const float* y, int64_t count);

void RopeRef(float* x, int64_t rows, int64_t heads, int64_t head_dim,
             int64_t row_stride, const int32_t* positions,
             const float* inv_freq);

void RmsNormHeadsRef(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                     int64_t row_stride, const float* weight, float eps);

void AddBiasRef(float* x, const float* bias, int64_t rows, int64_t cols);

void SiluMulRef(const float* x, int64_t rows, int64_t cols, float* out,
                int threads = 1);

void WriteKvRef(const float* k, const float* v, int64_t row_stride,
                int64_t kv_heads, int64_t head_dim,
                const AttentionMetadata& meta, float* k_cache, float* v_cache);

void AttentionRef(const float* q, int64_t q_stride, int64_t heads,
                  int64_t kv_heads, int64_t head_dim,
                  const AttentionMetadata& meta, const float* k_cache,
                  const float* v_cache, float* out, int threads);

void GatherRowsRef(const float* x, int64_t cols, const int32_t* rows, int64_t n,
                   float* out);

}  // namespace octet::cpu
