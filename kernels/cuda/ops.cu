// CUDA kernels for kernels/cuda/ops.h. Written for clarity first: one thread
// block per row (or per token and head for attention), binary32 arithmetic,
// bfloat16 storage. Attention is a warp per (token, head) with an online
// softmax over the cached keys, which serves prefill and decode alike.
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"

namespace octet::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;

__device__ inline float Load(const bf16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ inline void Store(bf16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 64 ? b : 65535 * 64);
}

__global__ void EmbeddingKernel(const void* table, bool f32_table, int64_t rows,
                                int64_t cols, int64_t row_begin,
                                const int32_t* ids, int64_t n, bf16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * cols;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / cols, c = i % cols;
    const int64_t r = ids[t] - row_begin;
    float v = 0.0f;
    if (r >= 0 && r < rows) {
      v = f32_table ? static_cast<const float*>(table)[r * cols + c]
                    : Load(static_cast<const bf16*>(table), r * cols + c);
    }
    Store(out, i, v);
  }
}

__device__ float BlockSum(float v) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const bf16* x, const float* w, int64_t cols, float eps,
                  bf16* out) {
  const bf16* xr = x + blockIdx.x * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float v = Load(xr, c);
    ss += v * v;
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    Store(out + blockIdx.x * cols, c, Load(xr, c) * inv * w[c]);
  }
}

__global__ void AddKernel(bf16* x, const bf16* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    Store(x, i, Load(x, i) + Load(y, i));
  }
}

__global__ void RopeKernel(bf16* x, int64_t rows, int64_t heads, int64_t half,
                           int64_t row_stride, const int32_t* positions,
                           const float* inv_freq) {
  const int64_t n = rows * heads * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t f = i % half, h = (i / half) % heads, r = i / (half * heads);
    const float angle = static_cast<float>(positions[r]) * inv_freq[f];
    float s, c;
    sincosf(angle, &s, &c);
    bf16* v = x + r * row_stride + h * 2 * half;
    const float a = Load(v, f), b = Load(v, f + half);
    Store(v, f, a * c - b * s);
    Store(v, f + half, b * c + a * s);
  }
}

__global__ void SiluMulKernel(const bf16* x, int64_t rows, int64_t cols,
                              bf16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       i < rows * cols; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float g = Load(x, r * 2 * cols + c),
                u = Load(x, r * 2 * cols + cols + c);
    Store(out, i, g / (1.0f + expf(-g)) * u);
  }
}

__global__ void WriteKvKernel(const bf16* k, const bf16* v, int64_t row_stride,
                              int64_t width, const int32_t* slots,
                              int64_t tokens, bf16* k_cache, bf16* v_cache) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       i < tokens * width; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / width, c = i % width;
    const int64_t slot = slots[t];
    if (slot < 0) continue;  // a padding row
    k_cache[slot * width + c] = k[t * row_stride + c];
    v_cache[slot * width + c] = v[t * row_stride + c];
  }
}

// One warp per (token, head); each lane owns head_dim / 32 dimensions
// (head_dim <= 256, a multiple of 32... or fewer lanes active).
constexpr int kMaxDimsPerLane = 8;

__global__ void AttentionKernel(const bf16* q, int64_t q_stride, int64_t heads,
                                int64_t group, int64_t head_dim,
                                AttentionMetadata meta, const bf16* k_cache,
                                const bf16* v_cache, bf16* out) {
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= meta.num_tokens * heads) return;
  const int64_t t = warp / heads, h = warp % heads, kvh = h / group;
  const int64_t width = heads / group * head_dim;
  const int64_t pos = meta.positions[t];
  const int64_t first =
      meta.sliding_window > 0 && pos - meta.sliding_window + 1 > 0
          ? pos - meta.sliding_window + 1
          : 0;
  const int32_t* table =
      meta.block_tables + meta.token_seq[t] * meta.max_blocks;
  const float scale = rsqrtf(static_cast<float>(head_dim));
  float qv[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  int dims = 0;
  for (int64_t d = lane; d < head_dim; d += 32) {
    qv[dims] = Load(q + t * q_stride + h * head_dim, d);
    acc[dims] = 0.0f;
    ++dims;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = first; j <= pos; ++j) {
    const int64_t slot =
        static_cast<int64_t>(table[j / meta.block_size]) * meta.block_size +
        j % meta.block_size;
    const bf16* kj = k_cache + slot * width + kvh * head_dim;
    float dot = 0.0f;
    int i = 0;
    for (int64_t d = lane; d < head_dim; d += 32) dot += qv[i++] * Load(kj, d);
    for (int o = 16; o > 0; o >>= 1)
      dot += __shfl_xor_sync(0xFFFFFFFFu, dot, o);
    const float s = dot * scale;
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new), p = expf(s - m_new);
    l = l * correction + p;
    const bf16* vj = v_cache + slot * width + kvh * head_dim;
    i = 0;
    for (int64_t d = lane; d < head_dim; d += 32, ++i)
      acc[i] = acc[i] * correction + p * Load(vj, d);
    m = m_new;
  }
  int i = 0;
  for (int64_t d = lane; d < head_dim; d += 32) {
    Store(out + t * heads * head_dim + h * head_dim, d, acc[i++] / l);
  }
}

// One block per row: each thread keeps its best (value, index) with the
// rule of ArgmaxIndex (larger wins, lower index on ties, NaN never), then a
// shared-memory tree merges them with the same rule.
__device__ inline bool Better(float v, int64_t i, float best, int64_t best_i) {
  return v > best || (v == best && i < best_i);
}

__global__ void __launch_bounds__(kThreads)
    ArgmaxKernel(const float* x, int64_t cols, int32_t* out) {
  __shared__ float values[kThreads];
  __shared__ int64_t indices[kThreads];
  const float* row = x + blockIdx.x * cols;
  float best = -INFINITY;
  int64_t best_i = cols;  // "none yet": loses every tie
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    if (Better(row[c], c, best, best_i)) {
      best = row[c];
      best_i = c;
    }
  }
  values[threadIdx.x] = best;
  indices[threadIdx.x] = best_i;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride &&
        Better(values[threadIdx.x + stride], indices[threadIdx.x + stride],
               values[threadIdx.x], indices[threadIdx.x])) {
      values[threadIdx.x] = values[threadIdx.x + stride];
      indices[threadIdx.x] = indices[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[blockIdx.x] = indices[0] < cols ? static_cast<int32_t>(indices[0]) : 0;
  }
}

__global__ void GatherKernel(const bf16* x, int64_t cols, const int32_t* rows,
                             int64_t n, bf16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * cols;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = x[rows[i / cols] * cols + i % cols];
  }
}

}  // namespace

#define OCTET_LAUNCHED() OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError())

absl::Status Embedding(const void* table, DType table_dtype, int64_t rows,
                       int64_t cols, int64_t row_begin, const int32_t* ids,
                       int64_t n, void* out, cudaStream_t stream) {
  if (table_dtype != DType::kF32 && table_dtype != DType::kBf16) {
    return absl::InvalidArgumentError("Embedding: table must be f32 or bf16");
  }
  if (n == 0) return absl::OkStatus();
  EmbeddingKernel<<<Blocks(n * cols), kThreads, 0, stream>>>(
      table, table_dtype == DType::kF32, rows, cols, row_begin, ids, n,
      static_cast<bf16*>(out));
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status RmsNorm(const void* x, const float* weight, int64_t rows,
                     int64_t cols, float eps, void* out, cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const bf16*>(x), weight, cols, eps, static_cast<bf16*>(out));
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status Add(void* x, const void* y, int64_t count, cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  AddKernel<<<Blocks(count), kThreads, 0, stream>>>(
      static_cast<bf16*>(x), static_cast<const bf16*>(y), count);
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status Rope(void* x, int64_t rows, int64_t heads, int64_t head_dim,
                  int64_t row_stride, const int32_t* positions,
                  const float* inv_freq, cudaStream_t stream) {
  const int64_t n = rows * heads * (head_dim / 2);
  if (n == 0) return absl::OkStatus();
  RopeKernel<<<Blocks(n), kThreads, 0, stream>>>(
      static_cast<bf16*>(x), rows, heads, head_dim / 2, row_stride, positions,
      inv_freq);
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status SiluMul(const void* x, int64_t rows, int64_t cols, void* out,
                     cudaStream_t stream) {
  if (rows * cols == 0) return absl::OkStatus();
  SiluMulKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(
      static_cast<const bf16*>(x), rows, cols, static_cast<bf16*>(out));
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status WriteKv(const void* k, const void* v, int64_t row_stride,
                     int64_t kv_heads, int64_t head_dim,
                     const AttentionMetadata& meta, void* k_cache,
                     void* v_cache, cudaStream_t stream) {
  const int64_t width = kv_heads * head_dim;
  if (meta.num_tokens == 0) return absl::OkStatus();
  WriteKvKernel<<<Blocks(meta.num_tokens * width), kThreads, 0, stream>>>(
      static_cast<const bf16*>(k), static_cast<const bf16*>(v), row_stride,
      width, meta.slots, meta.num_tokens, static_cast<bf16*>(k_cache),
      static_cast<bf16*>(v_cache));
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status Attention(const void* q, int64_t q_stride, int64_t heads,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, const void* k_cache,
                       const void* v_cache, void* out, cudaStream_t stream) {
  if (kv_heads <= 0 || heads % kv_heads != 0) {
    return absl::InvalidArgumentError("Attention: kv_heads must divide heads");
  }
  static_assert(kAttentionMaxHeadDim == 32 * kMaxDimsPerLane);
  if (head_dim > kAttentionMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Attention: head_dim ", head_dim, " above ", kAttentionMaxHeadDim));
  }
  const int64_t warps = meta.num_tokens * heads;
  if (warps == 0) return absl::OkStatus();
  constexpr int kWarpsPerBlock = 4;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  AttentionKernel<<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0,
                    stream>>>(
      static_cast<const bf16*>(q), q_stride, heads, heads / kv_heads, head_dim,
      meta, static_cast<const bf16*>(k_cache),
      static_cast<const bf16*>(v_cache), static_cast<bf16*>(out));
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status Argmax(const float* x, int64_t rows, int64_t cols, int32_t* out,
                    cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  ArgmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, cols,
                                                                     out);
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status GatherRows(const void* x, int64_t cols, const int32_t* rows,
                        int64_t n, void* out, cudaStream_t stream) {
  if (n * cols == 0) return absl::OkStatus();
  GatherKernel<<<Blocks(n * cols), kThreads, 0, stream>>>(
      static_cast<const bf16*>(x), cols, rows, n, static_cast<bf16*>(out));
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

}  // namespace octet::cuda
