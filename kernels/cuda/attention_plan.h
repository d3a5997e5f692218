// How the CUDA attention kernel (kernels/cuda/ops.cu) cuts its work: host
// arithmetic only, so that it is tested without a GPU
// (tests/kernels/attention_plan_test.cc).
//
// Two kernels. Decode (few tokens) uses the split kernel: a thread block
// takes one token, one KV head and up to kAttentionHeadsPerBlock
// of the query heads that share it (grouped-query attention: the K and V
// rows are loaded once for all of them), and one of `splits` equal parts of
// the token's keys. With few tokens (decode) the keys are split so that the
// GPU has about two blocks per multiprocessor (flash-decoding); a second
// kernel then merges each head's parts (their running max, sum and
// weighted values). Prefill (enough tokens to fill the GPU without
// splitting, and the model's query tiles in the metadata) uses the tiled
// kernel: a block takes a tile of up to kAttentionTileTokens consecutive
// tokens of one sequence, one KV head and its query heads, and loads each
// run of kAttentionTileKeys keys into shared memory once for all of them.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__CUDACC__)
#define OCTET_ATTENTION_HOST_DEVICE __host__ __device__
#else
#define OCTET_ATTENTION_HOST_DEVICE
#endif

namespace octet::cuda {

inline constexpr int64_t kAttentionHeadsPerBlock = 4;
inline constexpr int64_t kAttentionTileTokens = 8;
inline constexpr int64_t kAttentionTileKeys = 32;
// The tiled kernel keeps 2 tokens x 4 heads of query and output rows per
// warp in registers; wider heads take the split kernel.
inline constexpr int64_t kAttentionTiledMaxHeadDim = 128;
inline constexpr int64_t kAttentionMaxSplits = 32;
// A part holds at least this many keys (fewer parts for short contexts).
inline constexpr int64_t kAttentionMinKeysPerSplit = 32;

// Blocks of one part: tokens x KV heads x head chunks.
inline int64_t AttentionBlocks(int64_t tokens, int64_t heads,
                               int64_t kv_heads) {
  const int64_t group = heads / kv_heads;
  const int64_t chunks =
      (group + kAttentionHeadsPerBlock - 1) / kAttentionHeadsPerBlock;
  return tokens * kv_heads * chunks;
}

// The number of parts each token's keys are cut into: enough for about two
// blocks per multiprocessor, at most kAttentionMaxSplits, 1 when the tokens
// alone fill the GPU. Depends only on the shapes, so a captured decode
// (fixed tokens) always cuts the same way.
inline int64_t AttentionSplits(int64_t tokens, int64_t heads, int64_t kv_heads,
                               int64_t multiprocessors) {
  const int64_t blocks = AttentionBlocks(tokens, heads, kv_heads);
  if (blocks <= 0 || blocks >= multiprocessors) return 1;
  const int64_t want = (2 * multiprocessors + blocks - 1) / blocks;
  return std::clamp<int64_t>(want, 1, kAttentionMaxSplits);
}

// The keys of part `split` of a token whose keys are [first, last]:
// [*begin, *end), empty for parts past the keys. (Also device code.)
OCTET_ATTENTION_HOST_DEVICE inline void AttentionSplitRange(
    int64_t first, int64_t last, int64_t splits, int64_t split, int64_t* begin,
    int64_t* end) {
  const int64_t keys = last - first + 1;
  int64_t per = (keys + splits - 1) / splits;
  if (per < kAttentionMinKeysPerSplit) per = kAttentionMinKeysPerSplit;
  const int64_t b = first + split * per;
  *begin = b < last + 1 ? b : last + 1;
  *end = *begin + per < last + 1 ? *begin + per : last + 1;
}

// Binary32 values of the parts' scratch: per token, head and part, the
// weighted values [head_dim], the running max and the sum.
inline int64_t AttentionPartialFloats(int64_t tokens, int64_t heads,
                                      int64_t head_dim, int64_t splits) {
  return splits > 1 ? tokens * heads * splits * (head_dim + 2) : 0;
}

// Whether a batch takes the tiled kernel: it has tiles, one part per
// token suffices (attention_plan's AttentionSplits), and the heads fit.
inline bool AttentionUsesTiles(int64_t tiles, int64_t splits,
                               int64_t head_dim) {
  return tiles > 0 && splits == 1 && head_dim <= kAttentionTiledMaxHeadDim;
}

}  // namespace octet::cuda
