// CUDA kernels for kernels/cuda/ops.h. Written for clarity first: one thread
// block per row, binary32 arithmetic, bfloat16 storage. Attention is a block
// per (token, KV head, its query heads, part of the keys) with an online
// softmax (attention_plan.h), which serves prefill and decode alike.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/group_quantize.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/fp8.h"

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

// One row of RmsNorm by the whole block; `out` may be `xr` (every value is
// read before BlockSum's barrier, and each thread rewrites only its own).
__device__ void NormRow(const bf16* xr, const float* w, int64_t cols, float eps,
                        bf16* out) {
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    const float v = Load(xr, c);
    ss += v * v;
  }
  const float inv =
      rsqrtf(BlockSum<kThreads>(ss) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    Store(out, c, Load(xr, c) * inv * w[c]);
  }
}

__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const bf16* x, const float* w, int64_t cols, float eps,
                  bf16* out) {
  NormRow(x + blockIdx.x * cols, w, cols, eps, out + blockIdx.x * cols);
}

// A block per (row, head), in place.
__global__ void __launch_bounds__(kThreads)
    RmsNormHeadsKernel(bf16* x, int64_t heads, int64_t head_dim,
                       int64_t row_stride, const float* w, float eps) {
  const int64_t r = blockIdx.x / heads, h = blockIdx.x % heads;
  bf16* head = x + r * row_stride + h * head_dim;
  NormRow(head, w, head_dim, eps, head);
}

// A row of the values a FusedInput produces, as the producer's kernel
// (RmsNormKernel, SiluMulKernel) computes and rounds them.
struct ProducedRow {
  FusedInput::Op op;
  const bf16* x;  // the row's input
  const float* weight;
  float inv;  // RmsNorm's 1 / rms of the row
  int64_t cols;

  __device__ float operator()(int64_t c) const {
    float v;
    if (op == FusedInput::Op::kRmsNorm) {
      v = Load(x, c) * inv * weight[c];
    } else {
      const float g = Load(x, c), u = Load(x, cols + c);
      v = g / (1.0f + expf(-g)) * u;
    }
    return __bfloat162float(__float2bfloat16_rn(v));
  }
};

// Row `row` of what `in` produces. Every thread of the block calls it
// (RmsNorm's sum is block-wide).
__device__ ProducedRow MakeProducedRow(const FusedInput& in, int64_t row,
                                       int64_t cols) {
  ProducedRow p{in.op, nullptr, in.weight, 0.0f, cols};
  if (in.op == FusedInput::Op::kRmsNorm) {
    p.x = static_cast<const bf16*>(in.x) + row * cols;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      const float v = Load(p.x, c);
      ss += v * v;
    }
    p.inv = rsqrtf(BlockSum<kThreads>(ss) / static_cast<float>(cols) + in.eps);
  } else {
    p.x = static_cast<const bf16*>(in.x) + row * 2 * cols;
  }
  return p;
}

// Row r of what a FusedInput makes (GroupQuantizeGridKernel's rows).
struct ProducedRows {
  FusedInput in;
  int64_t cols;
  __device__ ProducedRow operator()(int64_t r) const {
    return MakeProducedRow(in, r, cols);
  }
};

// The group kernels of quantize.cu, on rows a FusedInput makes.
__global__ void __launch_bounds__(kThreads)
    FusedAbsMaxKernel(FusedInput in, int64_t cols, const int32_t* row_group,
                      float* absmax) {
  GroupAbsMaxRow<kThreads>(MakeProducedRow(in, blockIdx.x, cols), blockIdx.x,
                           cols, row_group, absmax);
}

__global__ void __launch_bounds__(kThreads)
    FusedQuantizeKernel(FusedInput in, int64_t cols, const int32_t* row_group,
                        const float* absmax, uint8_t* q, float* scale) {
  GroupQuantizeRow<kThreads>(MakeProducedRow(in, blockIdx.x, cols), blockIdx.x,
                             cols, row_group, absmax, q, scale);
}

__global__ void __launch_bounds__(kThreads)
    FusedOwnGroupQuantizeKernel(FusedInput in, int64_t cols, float* absmax,
                                uint8_t* q, float* scale) {
  OwnGroupQuantizeRow<kThreads>(MakeProducedRow(in, blockIdx.x, cols), cols,
                                absmax, q, scale);
}

__global__ void AddKernel(bf16* x, const bf16* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    Store(x, i, Load(x, i) + Load(y, i));
  }
}

// Turns the pair (f, f + half) of the head at v by position · inv_freq[f]
// (RopeKernel and RopeWriteKvKernel alike: rounded steps, no FMA).
__device__ inline void RotatePair(bf16* v, int64_t f, int64_t half,
                                  int32_t position, const float* inv_freq) {
  const float angle = __fmul_rn(static_cast<float>(position), inv_freq[f]);
  float s, c;
  sincosf(angle, &s, &c);
  const float a = Load(v, f), b = Load(v, f + half);
  Store(v, f, __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
  Store(v, f + half, __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
}

__global__ void RopeKernel(bf16* x, int64_t rows, int64_t heads, int64_t half,
                           int64_t row_stride, const int32_t* positions,
                           const float* inv_freq) {
  const int64_t n = rows * heads * half;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t f = i % half, h = (i / half) % heads, r = i / (half * heads);
    RotatePair(x + r * row_stride + h * 2 * half, f, half, positions[r],
               inv_freq);
  }
}

// RopeKernel on q's and k's heads of [q | k | v] rows, then WriteKvKernel's
// copies, in one launch: a thread per (row, head, pair) of q and k (a k
// pair also goes to the key cache, as turned), then per (row, entry) of v.
// Each thread reads and writes only its own pair.
__global__ void RopeWriteKvKernel(bf16* qkv, int64_t tokens, int64_t heads,
                                  int64_t kv_heads, int64_t half,
                                  int64_t row_stride, const int32_t* positions,
                                  const float* inv_freq, const int32_t* slots,
                                  bf16* k_cache, bf16* v_cache) {
  const int64_t turned = heads + kv_heads, width = kv_heads * 2 * half;
  const int64_t pairs = tokens * turned * half, n = pairs + tokens * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (i < pairs) {
      const int64_t f = i % half, h = (i / half) % turned,
                    r = i / (half * turned);
      bf16* head = qkv + r * row_stride + h * 2 * half;
      RotatePair(head, f, half, positions[r], inv_freq);
      const int64_t slot = slots[r];
      if (h < heads || slot < 0) continue;  // a q head, or a padding row
      bf16* cached = k_cache + slot * width + (h - heads) * 2 * half;
      cached[f] = head[f];
      cached[f + half] = head[f + half];
    } else {
      const int64_t t = (i - pairs) / width, c = (i - pairs) % width;
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      v_cache[slot * width + c] = qkv[t * row_stride + turned * 2 * half + c];
    }
  }
}

__global__ void AddBiasKernel(bf16* x, const float* bias, int64_t rows,
                              int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       i < rows * cols; i += int64_t{gridDim.x} * blockDim.x) {
    Store(x, i, Load(x, i) + bias[i % cols]);
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

// Attention (attention_plan.h has the plan): a block of kAttnWarps warps
// per (token, KV head, chunk of up to kAttentionHeadsPerBlock query heads,
// part of the keys). Each warp walks every kAttnWarps-th key of the part:
// its lanes load the key's and the value's head_dim entries once (kDims
// per lane, registers indexed by compile-time loops) for all the block's
// heads, and keep a running max, sum and weighted values per head (online
// softmax). The warps' states merge in shared memory; one part writes the
// output, several write their states for AttentionMergeKernel.
constexpr int kAttnWarps = 4;
constexpr int kAttnHeads = static_cast<int>(kAttentionHeadsPerBlock);

struct AttnArgs {
  const bf16* q;
  int64_t q_stride, heads, kv_heads, group, head_dim, splits;
  AttentionMetadata meta;
  const bf16* k_cache;
  const bf16* v_cache;
  bf16* out;
  float* partials;  // [token][head][split][head_dim + 2] when splits > 1
};

template <int kDims>
__global__ void __launch_bounds__(32 * kAttnWarps) AttentionKernel(AttnArgs a) {
  const int64_t chunks = (a.group + kAttnHeads - 1) / kAttnHeads;
  int64_t idx = blockIdx.x;
  const int64_t chunk = idx % chunks;
  idx /= chunks;
  const int64_t kvh = idx % a.kv_heads, t = idx / a.kv_heads;
  const int64_t split = blockIdx.y;
  const int64_t h0 = kvh * a.group + chunk * kAttnHeads;
  const int nh = static_cast<int>(a.group - chunk * kAttnHeads < kAttnHeads
                                      ? a.group - chunk * kAttnHeads
                                      : kAttnHeads);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const AttentionMetadata& meta = a.meta;
  const int64_t pos = meta.positions[t];
  const int64_t first =
      meta.sliding_window > 0 && pos - meta.sliding_window + 1 > 0
          ? pos - meta.sliding_window + 1
          : 0;
  int64_t begin, end;
  AttentionSplitRange(first, pos, a.splits, split, &begin, &end);
  const int32_t* table =
      meta.block_tables + meta.token_seq[t] * meta.max_blocks;
  const int64_t width = a.kv_heads * a.head_dim;
  const float scale = rsqrtf(static_cast<float>(a.head_dim));

  float qv[kAttnHeads][kDims], acc[kAttnHeads][kDims];
  float m[kAttnHeads], l[kAttnHeads];
#pragma unroll
  for (int h = 0; h < kAttnHeads; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int64_t d = lane + 32 * i;
      qv[h][i] =
          h < nh && d < a.head_dim
              ? Load(a.q + t * a.q_stride + (h0 + h) * a.head_dim, d) * scale
              : 0.0f;
      acc[h][i] = 0.0f;
    }
  }
  for (int64_t j = begin + warp; j < end; j += kAttnWarps) {
    const int64_t slot =
        static_cast<int64_t>(table[j / meta.block_size]) * meta.block_size +
        j % meta.block_size;
    const bf16* kj = a.k_cache + slot * width + kvh * a.head_dim;
    const bf16* vj = a.v_cache + slot * width + kvh * a.head_dim;
    float kd[kDims], vd[kDims];
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int64_t d = lane + 32 * i;
      kd[i] = d < a.head_dim ? Load(kj, d) : 0.0f;
      vd[i] = d < a.head_dim ? Load(vj, d) : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < kAttnHeads; ++h) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kDims; ++i) dot += qv[h][i] * kd[i];
      for (int o = 16; o > 0; o >>= 1) {
        dot += __shfl_xor_sync(0xFFFFFFFFu, dot, o);
      }
      const float m_new = fmaxf(m[h], dot);
      const float correction = expf(m[h] - m_new), p = expf(dot - m_new);
      l[h] = l[h] * correction + p;
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        acc[h][i] = acc[h][i] * correction + p * vd[i];
      }
      m[h] = m_new;
    }
  }

  // Merge the warps: each publishes its state, then the block combines them
  // per head and dimension.
  __shared__ float s_m[kAttnWarps][kAttnHeads], s_l[kAttnWarps][kAttnHeads];
  __shared__ float s_acc[kAttnWarps][kAttnHeads][32 * kDims];
#pragma unroll
  for (int h = 0; h < kAttnHeads; ++h) {
    if (lane == 0) {
      s_m[warp][h] = m[h];
      s_l[warp][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < kDims; ++i) s_acc[warp][h][lane + 32 * i] = acc[h][i];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < nh * a.head_dim; e += 32 * kAttnWarps) {
    const int h = e / static_cast<int>(a.head_dim);
    const int d = e % static_cast<int>(a.head_dim);
    float big = -INFINITY;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) big = fmaxf(big, s_m[w][h]);
    float sum = 0.0f, value = 0.0f;
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) {
      // A warp that saw no key has m = -inf and l = 0: weight 0.
      const float f = s_l[w][h] > 0.0f ? expf(s_m[w][h] - big) : 0.0f;
      sum += s_l[w][h] * f;
      value += s_acc[w][h][d] * f;
    }
    const int64_t head = h0 + h;
    if (a.splits == 1) {
      Store(a.out + t * a.heads * a.head_dim + head * a.head_dim, d,
            value / sum);
    } else {
      float* part = a.partials + ((t * a.heads + head) * a.splits + split) *
                                     (a.head_dim + 2);
      part[d] = value;
      if (d == 0) {
        part[a.head_dim] = big;
        part[a.head_dim + 1] = sum;
      }
    }
  }
}

// The tiled kernel (attention_plan.h): a block per (query tile, KV head,
// head chunk); each warp keeps two of the tile's tokens for the block's
// heads in registers; every kAttentionTileKeys keys of the tile's range
// are loaded into shared memory once and used by all of them. A key
// outside a token's own range (later than it, or before its window) is
// skipped for that token: warp-uniform, since a warp's rows are its own.
constexpr int kTileTokensPerWarp =
    static_cast<int>(kAttentionTileTokens) / kAttnWarps;
constexpr int kTileKeys = static_cast<int>(kAttentionTileKeys);

template <int kDims>
__global__ void __launch_bounds__(32 * kAttnWarps)
    TiledAttentionKernel(AttnArgs a) {
  const int64_t chunks = (a.group + kAttnHeads - 1) / kAttnHeads;
  const int64_t chunk = blockIdx.y % chunks, kvh = blockIdx.y / chunks;
  const int64_t h0 = kvh * a.group + chunk * kAttnHeads;
  const int nh = static_cast<int>(a.group - chunk * kAttnHeads < kAttnHeads
                                      ? a.group - chunk * kAttnHeads
                                      : kAttnHeads);
  const AttentionMetadata& meta = a.meta;
  const int64_t tile_first = meta.query_tiles[2 * blockIdx.x];
  const int64_t tile_tokens = meta.query_tiles[2 * blockIdx.x + 1];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t* table =
      meta.block_tables + meta.token_seq[tile_first] * meta.max_blocks;
  const int64_t width = a.kv_heads * a.head_dim;
  const float scale = rsqrtf(static_cast<float>(a.head_dim));
  auto first_key = [&](int64_t pos) {
    return meta.sliding_window > 0 && pos - meta.sliding_window + 1 > 0
               ? pos - meta.sliding_window + 1
               : int64_t{0};
  };
  // The tile's keys: from its first token's first key to its last token.
  const int64_t key_begin = first_key(meta.positions[tile_first]);
  const int64_t key_end = meta.positions[tile_first + tile_tokens - 1] + 1;

  int64_t token[kTileTokensPerWarp], pos[kTileTokensPerWarp],
      first[kTileTokensPerWarp];
  bool live[kTileTokensPerWarp];
  float qv[kTileTokensPerWarp][kAttnHeads][kDims];
  float acc[kTileTokensPerWarp][kAttnHeads][kDims];
  float m[kTileTokensPerWarp][kAttnHeads], l[kTileTokensPerWarp][kAttnHeads];
#pragma unroll
  for (int u = 0; u < kTileTokensPerWarp; ++u) {
    const int64_t r = warp * kTileTokensPerWarp + u;
    live[u] = r < tile_tokens;
    token[u] = tile_first + (live[u] ? r : 0);
    pos[u] = meta.positions[token[u]];
    first[u] = first_key(pos[u]);
#pragma unroll
    for (int h = 0; h < kAttnHeads; ++h) {
      m[u][h] = -INFINITY;
      l[u][h] = 0.0f;
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const int64_t d = lane + 32 * i;
        qv[u][h][i] =
            live[u] && h < nh && d < a.head_dim
                ? Load(a.q + token[u] * a.q_stride + (h0 + h) * a.head_dim, d) *
                      scale
                : 0.0f;
        acc[u][h][i] = 0.0f;
      }
    }
  }

  __shared__ bf16 sk[kTileKeys][32 * kDims], sv[kTileKeys][32 * kDims];
  for (int64_t base = key_begin; base < key_end; base += kTileKeys) {
    const int64_t n = key_end - base < kTileKeys ? key_end - base : kTileKeys;
    __syncthreads();  // the previous keys are used up
    for (int64_t e = threadIdx.x; e < n * a.head_dim; e += 32 * kAttnWarps) {
      const int64_t jj = e / a.head_dim, d = e % a.head_dim, j = base + jj;
      const int64_t slot =
          static_cast<int64_t>(table[j / meta.block_size]) * meta.block_size +
          j % meta.block_size;
      sk[jj][d] = a.k_cache[slot * width + kvh * a.head_dim + d];
      sv[jj][d] = a.v_cache[slot * width + kvh * a.head_dim + d];
    }
    __syncthreads();
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t j = base + jj;
      float kd[kDims], vd[kDims];
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const int d = lane + 32 * i;
        kd[i] = d < a.head_dim ? __bfloat162float(sk[jj][d]) : 0.0f;
        vd[i] = d < a.head_dim ? __bfloat162float(sv[jj][d]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kTileTokensPerWarp; ++u) {
        if (!live[u] || j < first[u] || j > pos[u]) continue;
#pragma unroll
        for (int h = 0; h < kAttnHeads; ++h) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < kDims; ++i) dot += qv[u][h][i] * kd[i];
          for (int o = 16; o > 0; o >>= 1) {
            dot += __shfl_xor_sync(0xFFFFFFFFu, dot, o);
          }
          const float m_new = fmaxf(m[u][h], dot);
          const float correction = expf(m[u][h] - m_new), p = expf(dot - m_new);
          l[u][h] = l[u][h] * correction + p;
#pragma unroll
          for (int i = 0; i < kDims; ++i) {
            acc[u][h][i] = acc[u][h][i] * correction + p * vd[i];
          }
          m[u][h] = m_new;
        }
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kTileTokensPerWarp; ++u) {
    if (!live[u]) continue;
#pragma unroll
    for (int h = 0; h < kAttnHeads; ++h) {
      if (h >= nh) continue;
#pragma unroll
      for (int i = 0; i < kDims; ++i) {
        const int64_t d = lane + 32 * i;
        if (d < a.head_dim) {
          Store(a.out + token[u] * a.heads * a.head_dim + (h0 + h) * a.head_dim,
                d, acc[u][h][i] / l[u][h]);
        }
      }
    }
  }
}

// Merges a token's parts per head: out = Σ value_s·e^(m_s - M) / Σ
// sum_s·e^(m_s - M), M the largest m_s of the parts that saw keys.
__global__ void AttentionMergeKernel(const float* partials, int64_t heads,
                                     int64_t head_dim, int64_t splits,
                                     bf16* out) {
  const int64_t th = blockIdx.x;  // token * heads + head
  const float* parts = partials + th * splits * (head_dim + 2);
  float big = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) {
    const float* p = parts + s * (head_dim + 2);
    if (p[head_dim + 1] > 0.0f) big = fmaxf(big, p[head_dim]);
  }
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.0f, value = 0.0f;
    for (int64_t s = 0; s < splits; ++s) {
      const float* p = parts + s * (head_dim + 2);
      if (!(p[head_dim + 1] > 0.0f)) continue;  // a part past the keys
      const float f = expf(p[head_dim] - big);
      sum += p[head_dim + 1] * f;
      value += p[d] * f;
    }
    Store(out + th * head_dim, d, value / sum);
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

absl::Status RopeWriteKv(void* qkv, int64_t heads, int64_t kv_heads,
                         int64_t head_dim, int64_t row_stride,
                         const float* inv_freq, const AttentionMetadata& meta,
                         void* k_cache, void* v_cache, cudaStream_t stream) {
  const int64_t half = head_dim / 2, tokens = meta.num_tokens;
  const int64_t n = tokens * ((heads + kv_heads) * half + kv_heads * head_dim);
  if (n == 0) return absl::OkStatus();
  RopeWriteKvKernel<<<Blocks(n), kThreads, 0, stream>>>(
      static_cast<bf16*>(qkv), tokens, heads, kv_heads, half, row_stride,
      meta.positions, inv_freq, meta.slots, static_cast<bf16*>(k_cache),
      static_cast<bf16*>(v_cache));
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status RmsNormHeads(void* x, int64_t rows, int64_t heads,
                          int64_t head_dim, int64_t row_stride,
                          const float* weight, float eps, cudaStream_t stream) {
  const int64_t blocks = rows * heads;
  if (blocks == 0) return absl::OkStatus();
  if (blocks > int64_t{0x7FFFFFFF}) {
    return absl::InvalidArgumentError("RmsNormHeads: too many heads");
  }
  RmsNormHeadsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<bf16*>(x), heads, head_dim, row_stride, weight, eps);
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status AddBias(void* x, const float* bias, int64_t rows, int64_t cols,
                     cudaStream_t stream) {
  if (rows * cols == 0) return absl::OkStatus();
  AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(
      static_cast<bf16*>(x), bias, rows, cols);
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

// Calls launch(std::integral_constant<int, N>) for the N head_dim / 32
// entries per lane (rounded up) that a kernel template takes, N in
// [1, kMax]; the caller has checked head_dim against kMax.
template <int kMax, int N = 1, typename F>
void WithDimsPerLane(int64_t head_dim, F launch) {
  if constexpr (N <= kMax) {
    if ((head_dim + 31) / 32 == N) {
      launch(std::integral_constant<int, N>{});
    } else {
      WithDimsPerLane<kMax, N + 1>(head_dim, launch);
    }
  }
}

absl::Status Attention(const void* q, int64_t q_stride, int64_t heads,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, const void* k_cache,
                       const void* v_cache, void* out, int64_t splits,
                       float* partials, cudaStream_t stream) {
  if (kv_heads <= 0 || heads % kv_heads != 0) {
    return absl::InvalidArgumentError("Attention: kv_heads must divide heads");
  }
  if (head_dim <= 0 || head_dim > kAttentionMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("Attention: head_dim ",
                                                   head_dim, " outside [1, ",
                                                   kAttentionMaxHeadDim, "]"));
  }
  if (splits < 1 || splits > kAttentionMaxSplits ||
      (splits > 1 && partials == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attention: ", splits, " parts without their scratch"));
  }
  const int64_t blocks = AttentionBlocks(meta.num_tokens, heads, kv_heads);
  if (blocks == 0) return absl::OkStatus();
  const AttnArgs args{static_cast<const bf16*>(q),
                      q_stride,
                      heads,
                      kv_heads,
                      heads / kv_heads,
                      head_dim,
                      splits,
                      meta,
                      static_cast<const bf16*>(k_cache),
                      static_cast<const bf16*>(v_cache),
                      static_cast<bf16*>(out),
                      partials};
  constexpr int kThreads = 32 * kAttnWarps;
  if (AttentionUsesTiles(meta.num_query_tiles, splits, head_dim)) {
    const int64_t chunks = (heads / kv_heads + kAttnHeads - 1) / kAttnHeads;
    const dim3 tiles(static_cast<unsigned>(meta.num_query_tiles),
                     static_cast<unsigned>(kv_heads * chunks));
    WithDimsPerLane<kAttentionTiledMaxHeadDim / 32>(head_dim, [&](auto dims) {
      TiledAttentionKernel<dims()><<<tiles, kThreads, 0, stream>>>(args);
    });
    OCTET_LAUNCHED();
    return absl::OkStatus();
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
  WithDimsPerLane<kAttentionMaxHeadDim / 32>(head_dim, [&](auto dims) {
    AttentionKernel<dims()><<<grid, kThreads, 0, stream>>>(args);
  });
  OCTET_LAUNCHED();
  if (splits > 1) {
    AttentionMergeKernel<<<static_cast<unsigned>(meta.num_tokens * heads), 128,
                           0, stream>>>(partials, heads, head_dim, splits,
                                        static_cast<bf16*>(out));
    OCTET_LAUNCHED();
  }
  return absl::OkStatus();
}

absl::Status FusedAbsMax(const FusedInput& in, int64_t rows, int64_t cols,
                         const int32_t* row_group, int64_t groups,
                         float* absmax, cudaStream_t stream) {
  if (groups < 1 || (groups > 1 && row_group == nullptr)) {
    return absl::InvalidArgumentError("FusedAbsMax: groups without a row map");
  }
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(absmax, 0, groups * sizeof(float), stream));
  if (rows == 0 || cols == 0) return absl::OkStatus();
  FusedAbsMaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      in, cols, row_group, absmax);
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status FusedQuantize(const FusedInput& in, int64_t rows, int64_t cols,
                           const int32_t* row_group, const float* absmax,
                           uint8_t* q, float* scale, cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  FusedQuantizeKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      in, cols, row_group, absmax, q, scale);
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status FusedQuantizeOwnRows(const FusedInput& in, int64_t rows,
                                  int64_t cols, float* absmax, uint8_t* q,
                                  float* scale, cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  FusedOwnGroupQuantizeKernel<<<static_cast<unsigned>(rows), kThreads, 0,
                                stream>>>(in, cols, absmax, q, scale);
  OCTET_LAUNCHED();
  return absl::OkStatus();
}

absl::Status FusedQuantizeGroups(const FusedInput& in, int64_t rows,
                                 int64_t cols, const int32_t* row_group,
                                 int64_t groups, float* absmax, uint8_t* q,
                                 float* scale, cudaStream_t stream) {
  if (groups < 1 || (groups > 1 && row_group == nullptr)) {
    return absl::InvalidArgumentError(
        "FusedQuantizeGroups: groups without a row map");
  }
  if (rows == 0) return absl::OkStatus();
  const cudaError_t e = LaunchGroupQuantizeGrid<kThreads>(
      ProducedRows{in, cols}, rows, cols, row_group, groups, absmax, q, scale,
      stream);
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // a refused launch leaves nothing behind
  if (!CooperativeRefused(e)) {
    return absl::InternalError(
        absl::StrCat("FusedQuantizeGroups: ", cudaGetErrorString(e)));
  }
  SayCooperativeRefusedOnce(e);
  OCTET_RETURN_IF_ERROR(
      FusedAbsMax(in, rows, cols, row_group, groups, absmax, stream));
  return FusedQuantize(in, rows, cols, row_group, absmax, q, scale, stream);
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
