// The CUDA attention kernel's plan (kernels/cuda/attention_plan.h): how many
// parts each token's keys are cut into, and which keys each part takes.
// Host arithmetic, so it is checked here without a GPU; the kernel itself
// is checked against the CPU by the backend table (gpu).
#include "kernels/cuda/attention_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace octet::cuda {
namespace {

TEST(AttentionPlan, DecodeIsSplitToFillTheGpuAndPrefillIsNot) {
  constexpr int64_t kH200 = 132;
  // Mistral-7B: 32 heads on 8 KV heads, 4 per block: 8 blocks a token.
  EXPECT_EQ(AttentionBlocks(1, 32, 8), 8);
  EXPECT_EQ(AttentionSplits(1, 32, 8, kH200), kAttentionMaxSplits);
  EXPECT_EQ(AttentionSplits(8, 32, 8, kH200), 5);   // 64 blocks: 264 / 64
  EXPECT_EQ(AttentionSplits(17, 32, 8, kH200), 1);  // 136 blocks fill it
  EXPECT_EQ(AttentionSplits(2048, 32, 8, kH200), 1);
  // Eight query heads per KV head: two blocks per KV head.
  EXPECT_EQ(AttentionBlocks(1, 64, 8), 16);
  EXPECT_EQ(AttentionSplits(1, 64, 8, kH200), 17);
  // No tokens: one part (nothing is launched).
  EXPECT_EQ(AttentionSplits(0, 32, 8, kH200), 1);
}

TEST(AttentionPlan, PartsCoverEachKeyOnceInOrder) {
  for (int64_t first : {0, 5, 4000}) {
    for (int64_t keys : {1, 2, 31, 32, 33, 100, 1000, 4096, 32768}) {
      const int64_t last = first + keys - 1;
      for (int64_t splits : {1, 2, 3, 7, 32}) {
        int64_t next = first;
        for (int64_t s = 0; s < splits; ++s) {
          int64_t begin, end;
          AttentionSplitRange(first, last, splits, s, &begin, &end);
          ASSERT_LE(begin, end);
          if (begin == end) continue;  // a part past the keys
          ASSERT_EQ(begin, next) << first << " " << keys << " " << splits;
          // Only the last part may hold fewer than the minimum.
          if (end <= last) {
            EXPECT_GE(end - begin, kAttentionMinKeysPerSplit);
          }
          next = end;
        }
        EXPECT_EQ(next, last + 1) << first << " " << keys << " " << splits;
      }
    }
  }
}

// Each sequence's run of new tokens cut into tiles of at most 8, never
// across sequences.
TEST(AttentionPlan, QueryTilesCutEachSequencesRun) {
  EXPECT_EQ(QueryTiles({0, 5, 25}, {5, 20, 1}, 8),
            (std::vector<int32_t>{0, 5, 5, 8, 13, 8, 21, 4, 25, 1}));
  EXPECT_TRUE(QueryTiles({}, {}, 8).empty());
}

TEST(AttentionPlan, TilesOnlyWhenOnePartSufficesAndHeadsFit) {
  EXPECT_TRUE(AttentionUsesTiles(4, 1, 128));
  EXPECT_FALSE(AttentionUsesTiles(0, 1, 128));  // none given: decode
  EXPECT_FALSE(AttentionUsesTiles(4, 3, 128));  // split: few tokens
  EXPECT_FALSE(AttentionUsesTiles(4, 1, 256));  // too wide for registers
}

TEST(AttentionPlan, ScratchOnlyForSeveralParts) {
  EXPECT_EQ(AttentionPartialFloats(4, 32, 128, 1), 0);
  EXPECT_EQ(AttentionPartialFloats(4, 32, 128, 8), 4 * 32 * 8 * 130);
}

}  // namespace
}  // namespace octet::cuda
