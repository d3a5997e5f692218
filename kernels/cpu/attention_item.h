// Internal: the body of the attention kernel (attention_kernels.h), written
// as plain loops for the compiler to vectorize with the flags of the
// translation unit that includes it (attention_avx2.cc,
// attention_avx512.cc). Everything has internal linkage (anonymous
// namespace) and calls no library function: each instruction-set unit gets
// its own copy, and the linker can never hand an AVX-512 copy to the AVX2
// path (tests/build/check_isa_symbols.cmake).
#pragma once

#include <cstdint>

#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace octet::cpu_internal {
namespace {  // NOLINT(build/namespaces): see above

constexpr int kLanes = 16;  // keys per step, and the denominator's lanes

// kN of the level's vectors (vector_math.h) to a step of kLanes: the same
// lanes in the same order at either level, so both give the same bits.
constexpr int kN = kLanes / kWidth;

// Lane l of the vector starting at key `first` is a key below len.
OCTET_V_INLINE VI Below(int64_t first, int64_t len) {
  VI lane;
  for (int l = 0; l < kWidth; ++l) lane[l] = l;
  return lane < static_cast<int32_t>(len - first);
}

// Stage kHalf of a kWidth x kWidth transpose in registers (m[r]: row r):
// in every aligned pair of kHalf-wide row and column blocks, the upper
// right kHalf x kHalf block swaps with the lower left. One stage per bit of
// the index, log2(kWidth) in all, turn rows into columns.
template <int kHalf>
OCTET_V_INLINE void SwapBlocks(V (&m)[kWidth]) {
  VI lo = {}, hi = {};  // indices into (a, b): b's lanes from kWidth
  for (int c = 0; c < kWidth; ++c) {
    lo[c] = (c & kHalf) != 0 ? kWidth + c - kHalf : c;
    hi[c] = (c & kHalf) != 0 ? kWidth + c : c + kHalf;
  }
  for (int r = 0; r < kWidth; ++r) {
    if ((r & kHalf) != 0) continue;
    const V a = m[r], b = m[r + kHalf];
    m[r] = __builtin_shuffle(a, b, lo);
    m[r + kHalf] = __builtin_shuffle(a, b, hi);
  }
}

OCTET_V_INLINE void Transpose(V (&m)[kWidth]) {
  if constexpr (kWidth == 16) SwapBlocks<8>(m);
  SwapBlocks<4>(m);
  SwapBlocks<2>(m);
  SwapBlocks<1>(m);
}

// The context's keys of the item's KV head, transposed: kt[d][j - j0];
// columns past the context are zero. kWidth keys by kWidth of d at a time,
// transposed in registers: loading a block's rows together keeps many of
// the cache's lines in flight, where copying one float at a time (a store
// to another line each) waited on every row's in turn.
inline void TransposeKeys(const AttentionItem& it) {
  const int64_t n = it.context - it.j0, hd = it.head_dim;
  const int64_t whole_d = hd / kWidth * kWidth;
  auto key = [&](int64_t j) {
    return it.k_cache + static_cast<int64_t>(it.slots[j]) * it.kv_width +
           it.kv_head * hd;
  };
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    const float* rows[kWidth];
    for (int l = 0; l < kWidth; ++l) rows[l] = key(j + l);
    for (int64_t d = 0; d < whole_d; d += kWidth) {
      V m[kWidth];
      for (int l = 0; l < kWidth; ++l) m[l] = Load(rows[l] + d);
      Transpose(m);
      for (int x = 0; x < kWidth; ++x) {
        Store(it.kt + (d + x) * it.kt_stride + j, m[x]);
      }
    }
    for (int64_t d = whole_d; d < hd; ++d) {
      for (int l = 0; l < kWidth; ++l) {
        it.kt[d * it.kt_stride + j + l] = rows[l][d];
      }
    }
  }
  for (; j < n; ++j) {
    const float* k = key(j);
    for (int64_t d = 0; d < hd; ++d) it.kt[d * it.kt_stride + j] = k[d];
  }
  for (int64_t d = 0; d < hd; ++d) {
    for (j = n; j < it.kt_stride; ++j) it.kt[d * it.kt_stride + j] = 0;
  }
}

// Blocks of kLanes keys (Scores) or of head_dim (WeightValues) a step
// takes. With one block for four heads a step ran four accumulator chains,
// each fused multiply-add waiting on the chain's last (4 cycles), and
// broadcast each query element or weight for that one block; up to four
// blocks a step keep up to 16 chains in flight (AVX-512: half its 32
// registers; AVX2, with 16 registers and two of them per block, keeps 8)
// and broadcast once for all of them: prefill attention 20-25% faster
// (bench_attention, 2026-12-06; decode's gain came from TransposeKeys).
// Each accumulator adds its own products in the same order however many a
// step takes: the bits do not change.
constexpr int kMaxAccumulators = kWidth == 16 ? 16 : 8;
constexpr int BlocksPerStep(int heads) {
  const int blocks = kMaxAccumulators / (heads * kN);
  return blocks < 1 ? 1 : (blocks > 4 ? 4 : blocks);
}

// acc[i][c] += x(i) * vector c at `row`, for kH heads and kC vectors: a
// step of ScoreBlocks (row: kt's row d, x: each head's query element d)
// and of WeightBlocks (row: key j's values, x: each head's weight of j).
template <int kH, int kC, typename X>
OCTET_V_INLINE void MultiplyAdd(V (&acc)[kH][kC], const float* row, X x) {
  V r[kC];
#pragma GCC unroll 8
  for (int c = 0; c < kC; ++c) r[c] = Load(row + c * kWidth);
#pragma GCC unroll 4
  for (int i = 0; i < kH; ++i) {
    const float xi = x(i);
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) acc[i][c] = MulAdd(Splat(xi), r[c], acc[i][c]);
  }
}

// Scores of kH query heads against kB blocks of kLanes keys, starting at
// key `first` of kt: scores[i][j] = (sum over d, in order, of q[i][d] *
// k_j[d]) * scale.
template <int kH, int kB>
inline void ScoreBlocks(const AttentionItem& it, const float* const* q,
                        int64_t off, int64_t first) {
  constexpr int kC = kB * kN;
  V acc[kH][kC] = {};
  const float* kb = it.kt + off + first;
  for (int64_t d = 0; d < it.head_dim; ++d) {
    MultiplyAdd(acc, kb + d * it.kt_stride, [&](int i) { return q[i][d]; });
  }
#pragma GCC unroll 4
  for (int i = 0; i < kH; ++i) {
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) {
      Store(it.scores + i * it.kt_stride + first + c * kWidth,
            acc[i][c] * it.scale);
    }
  }
}

// Scores of kH query heads (q[i] their rows) against keys [off, off + len)
// of kt, BlocksPerStep(kH) blocks of kLanes keys at a time, then one (the
// lanes past len are scratch).
template <int kH>
inline void Scores(const AttentionItem& it, const float* const* q, int64_t off,
                   int64_t len) {
  constexpr int kB = BlocksPerStep(kH);
  int64_t b = 0;
  for (; b + kB * kLanes <= len; b += kB * kLanes) {
    ScoreBlocks<kH, kB>(it, q, off, b);
  }
  for (; b < len; b += kLanes) ScoreBlocks<kH, 1>(it, q, off, b);
}

// Softmax weights of scores [0, len) in place: e^(s - max) / denominator,
// the denominator summed in kLanes fixed lanes then pairwise.
inline void Softmax(float* s, int64_t len) {
  V mv = Splat(-__builtin_inff());
  for (int64_t b = 0; b < len; b += kWidth) {
    const V x = Load(s + b);
    mv = Below(b, len) && x > mv ? x : mv;
  }
  float max = mv[0];
  for (int l = 1; l < kWidth; ++l) max = mv[l] > max ? mv[l] : max;
  V lanes[kN] = {};
  for (int64_t b = 0; b < len; b += kLanes) {
#pragma GCC unroll 2
    for (int n = 0; n < kN; ++n) {
      const int64_t at = b + n * kWidth;
      const V e = ExpNonPositive(Load(s + at) - max);
      const V kept = Below(at, len) ? e : Splat(0.0f);
      Store(s + at, kept);
      lanes[n] += kept;
    }
  }
  float sum[kLanes];
  for (int n = 0; n < kN; ++n) Store(sum + n * kWidth, lanes[n]);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) sum[l] += sum[l + w];
  }
  const float denom = sum[0];
  for (int64_t b = 0; b < len; b += kWidth) Store(s + b, Load(s + b) / denom);
}

// out_i[d] = sum over keys j, in order, of p_ij * v_j[d] for kH heads and
// kB blocks of kLanes values of d from d0.
template <int kH, int kB>
inline void WeightBlocks(const AttentionItem& it, int64_t off, int64_t len,
                         int64_t d0, float* const* out) {
  constexpr int kC = kB * kN;
  V acc[kH][kC] = {};
  for (int64_t j = 0; j < len; ++j) {
    const float* vj = it.v_cache +
                      static_cast<int64_t>(it.slots[off + j]) * it.kv_width +
                      it.kv_head * it.head_dim + d0;
    MultiplyAdd(acc, vj,
                [&](int i) { return it.scores[i * it.kt_stride + j]; });
  }
#pragma GCC unroll 4
  for (int i = 0; i < kH; ++i) {
#pragma GCC unroll 8
    for (int c = 0; c < kC; ++c) Store(out[i] + d0 + c * kWidth, acc[i][c]);
  }
}

// out_i[d] = sum over keys j, in order, of p_ij * v_j[d], for kH heads:
// BlocksPerStep(kH) blocks of kLanes of d at a time, then one, the rest of d
// one by one.
template <int kH>
inline void WeightValues(const AttentionItem& it, int64_t off, int64_t len,
                         float* const* out) {
  constexpr int kB = BlocksPerStep(kH);
  const int64_t hd = it.head_dim, whole = hd / kLanes * kLanes;
  int64_t d = 0;
  for (; d + kB * kLanes <= whole; d += kB * kLanes) {
    WeightBlocks<kH, kB>(it, off, len, d, out);
  }
  for (; d < whole; d += kLanes) WeightBlocks<kH, 1>(it, off, len, d, out);
  const float* p = it.scores;
  auto value = [&](int64_t j) {
    return it.v_cache + static_cast<int64_t>(it.slots[off + j]) * it.kv_width +
           it.kv_head * hd;
  };
  for (d = whole; d < hd; ++d) {
    for (int i = 0; i < kH; ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < len; ++j) {
        acc = MulAdd(p[i * it.kt_stride + j], value(j)[d], acc);
      }
      out[i][d] = acc;
    }
  }
}

// Heads [h0, h0 + kH) of the item's group for row t.
template <int kH>
inline void HeadChunk(const AttentionItem& it, int64_t t, int64_t h0) {
  const int64_t pos = it.positions[t];
  int64_t first = 0;
  if (it.sliding_window > 0 && pos - it.sliding_window + 1 > 0) {
    first = pos - it.sliding_window + 1;
  }
  const int64_t off = first - it.j0, len = pos - first + 1;
  const float* q[kH];
  float* out[kH];
  for (int i = 0; i < kH; ++i) {
    const int64_t h = it.kv_head * it.group + h0 + i;
    q[i] = it.q + t * it.q_stride + h * it.head_dim;
    out[i] = it.out + t * it.out_stride + h * it.head_dim;
  }
  Scores<kH>(it, q, off, len);
  for (int i = 0; i < kH; ++i) Softmax(it.scores + i * it.kt_stride, len);
  WeightValues<kH>(it, off, len, out);
}

inline void AttentionItemKernel(const AttentionItem& it) {
  TransposeKeys(it);
  for (int64_t r = 0; r < it.num_rows; ++r) {
    const int64_t t = it.rows[r];
    int64_t h = 0;
    for (; h + 4 <= it.group; h += 4) HeadChunk<4>(it, t, h);
    switch (it.group - h) {
      case 3:
        HeadChunk<3>(it, t, h);
        break;
      case 2:
        HeadChunk<2>(it, t, h);
        break;
      case 1:
        HeadChunk<1>(it, t, h);
        break;
      default:
        break;
    }
  }
}

}  // namespace
}  // namespace octet::cpu_internal
