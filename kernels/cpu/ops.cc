// The scalar references of kernels/cpu/ops.h, which are also the CPU
// backend's implementation of these operations: straightforward loops in
// binary32, parallel over rows or (token, head) with OpenMP where a row's
// arithmetic does not depend on the split, so the results do not change
// with the thread count.
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/sampling.h"

namespace octet::cpu {

void EmbeddingRef(const void* table, DType table_dtype, int64_t rows,
                  int64_t cols, int64_t row_begin, const int32_t* ids,
                  int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = static_cast<int64_t>(ids[i]) - row_begin;
    float* dst = out + i * cols;
    if (r < 0 || r >= rows) {
      std::fill(dst, dst + cols, 0.0f);
    } else if (table_dtype == DType::kF32) {
      std::memcpy(dst, static_cast<const float*>(table) + r * cols,
                  cols * sizeof(float));
    } else {
      const Bf16* src = static_cast<const Bf16*>(table) + r * cols;
      for (int64_t c = 0; c < cols; ++c) dst[c] = Bf16ToFloat(src[c]);
    }
  }
}

void RmsNormRef(const float* x, const float* weight, int64_t rows, int64_t cols,
                float eps, float* out, int threads) {
#pragma omp parallel for num_threads(threads) if (rows > 1 && threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += xr[c] * xr[c];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(cols) + eps);
    float* o = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = xr[c] * inv * weight[c];
  }
}

void AddRef(float* x, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

void RopeRef(float* x, int64_t rows, int64_t heads, int64_t head_dim,
             int64_t row_stride, const int32_t* positions,
             const float* inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float pos = static_cast<float>(positions[r]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + r * row_stride + h * head_dim;
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void RmsNormHeadsRef(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                     int64_t row_stride, const float* weight, float eps) {
  // A row's heads lie side by side: RmsNorm's rows of head_dim, in place.
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * row_stride;
    RmsNormRef(xr, weight, heads, head_dim, eps, xr, /*threads=*/1);
  }
}

void AddBiasRef(float* x, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += bias[c];
  }
}

void SiluMulRef(const float* x, int64_t rows, int64_t cols, float* out,
                int threads) {
  // A library exp per element: 60 ms of a 128-token llama-1b prefill on one
  // thread (bench_decode --profile, 2026-12-06). A vectorized exp changed
  // the bits by a few ulp, and that moved SmolLM2's FP8 per-tensor
  // perplexity by 1.5% (chaotic at that level), past the GGUF oracle's 1%:
  // rows split across threads instead, the same bits.
#pragma omp parallel for num_threads(threads) if (rows > 1 && threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = x + r * 2 * cols;
    const float* u = g + cols;
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = g[c] / (1.0f + std::exp(-g[c])) * u[c];
    }
  }
}

void WriteKvRef(const float* k, const float* v, int64_t row_stride,
                int64_t kv_heads, int64_t head_dim,
                const AttentionMetadata& meta, float* k_cache, float* v_cache) {
  const int64_t width = kv_heads * head_dim;
  for (int64_t t = 0; t < meta.num_tokens; ++t) {
    const int64_t slot = meta.slots[t];
    if (slot < 0) continue;  // a padding row
    std::memcpy(k_cache + slot * width, k + t * row_stride,
                width * sizeof(float));
    std::memcpy(v_cache + slot * width, v + t * row_stride,
                width * sizeof(float));
  }
}

void AttentionRef(const float* q, int64_t q_stride, int64_t heads,
                  int64_t kv_heads, int64_t head_dim,
                  const AttentionMetadata& meta, const float* k_cache,
                  const float* v_cache, float* out, int threads) {
  const int64_t group = heads / kv_heads;
  const int64_t width = kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
#pragma omp parallel for collapse(2) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < meta.num_tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t pos = meta.positions[t];
      const int64_t first =
          meta.sliding_window > 0
              ? std::max<int64_t>(0, pos - meta.sliding_window + 1)
              : 0;
      const int32_t* table =
          meta.block_tables + meta.token_seq[t] * meta.max_blocks;
      const float* qh = q + t * q_stride + h * head_dim;
      const int64_t kvh = h / group;
      std::vector<float> scores(pos - first + 1);
      float max_score = -INFINITY;
      for (int64_t j = first; j <= pos; ++j) {
        const int64_t slot =
            static_cast<int64_t>(table[j / meta.block_size]) * meta.block_size +
            j % meta.block_size;
        const float* kj = k_cache + slot * width + kvh * head_dim;
        // A vector reduction: its order is fixed by the build, the same for
        // every token and every batch.
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < head_dim; ++d) dot += qh[d] * kj[d];
        scores[j - first] = dot * scale;
        max_score = std::max(max_score, scores[j - first]);
      }
      float denom = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - max_score);
        denom += s;
      }
      float* o = out + t * heads * head_dim + h * head_dim;
      std::fill(o, o + head_dim, 0.0f);
      for (int64_t j = first; j <= pos; ++j) {
        const int64_t slot =
            static_cast<int64_t>(table[j / meta.block_size]) * meta.block_size +
            j % meta.block_size;
        const float* vj = v_cache + slot * width + kvh * head_dim;
        const float p = scores[j - first] / denom;
        for (int64_t d = 0; d < head_dim; ++d) o[d] += p * vj[d];
      }
    }
  }
}

void GatherRowsRef(const float* x, int64_t cols, const int32_t* rows, int64_t n,
                   float* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * cols, x + static_cast<int64_t>(rows[i]) * cols,
                cols * sizeof(float));
  }
}

}  // namespace octet::cpu
