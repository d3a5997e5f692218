// The KV blocks' pool and its prefix cache (coordinator/block_pool.h):
// free blocks first, cached chains found whole-block by whole-block and
// checked, least recently used ones evicted, stale and duplicate entries,
// clearing, and caching off.
#include "coordinator/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace octet {
namespace {

constexpr int64_t kBlock = 4;

std::vector<int32_t> Tokens(int64_t n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Takes blocks for `tokens` and caches each full one, as a sequence whose
// steps were written would.
std::vector<int32_t> Write(BlockPool& pool, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> blocks;
  for (size_t i = 0; i * kBlock < tokens.size(); ++i) {
    blocks.push_back(pool.Take());
  }
  for (size_t i = 0; (i + 1) * kBlock <= tokens.size(); ++i) {
    pool.Cache(blocks, i,
               std::span<const int32_t>(tokens).subspan(i * kBlock, kBlock));
  }
  return blocks;
}

void ReleaseAll(BlockPool& pool, const std::vector<int32_t>& blocks) {
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool.Release(*b);
}

TEST(BlockPoolTest, FreeBlocksAreTakenLowestFirst) {
  BlockPool pool(3, kBlock, true);
  EXPECT_EQ(pool.available(), 3);
  EXPECT_EQ(pool.Take(), 0);
  EXPECT_EQ(pool.Take(), 1);
  EXPECT_EQ(pool.available(), 1);
  pool.Release(1);
  EXPECT_EQ(pool.Take(), 1);  // uncached: free again, taken next
}

TEST(BlockPoolTest, AReleasedChainIsFoundWholeBlocksOnly) {
  BlockPool pool(8, kBlock, true);
  const std::vector<int32_t> t = Tokens(10);  // two full blocks and a part
  const std::vector<int32_t> blocks = Write(pool, t);
  EXPECT_EQ(pool.cached(), 2);
  ReleaseAll(pool, blocks);
  EXPECT_EQ(pool.available(), 8);  // cached and unused blocks count
  EXPECT_EQ(pool.cached(), 2);

  const std::vector<int32_t> found = pool.Match(t, 5);
  EXPECT_EQ(found, (std::vector<int32_t>{blocks[0], blocks[1]}));
  EXPECT_EQ(pool.available(), 6);
  EXPECT_EQ(pool.Match(t, 1), (std::vector<int32_t>{blocks[0]}));  // shared
  EXPECT_EQ(pool.available(), 6);

  // Another second block, or another first one, finds less or nothing.
  std::vector<int32_t> other = t;
  other[5] = 7;
  EXPECT_EQ(pool.Match(other, 2).size(), 1u);
  other[0] = 7;
  EXPECT_TRUE(pool.Match(other, 2).empty());
}

TEST(BlockPoolTest, FreeBlocksGoBeforeCachedOnesLeastRecentFirst) {
  BlockPool pool(4, kBlock, true);
  const std::vector<int32_t> a = Write(pool, Tokens(8, 100));  // blocks 0, 1
  const std::vector<int32_t> b = Write(pool, Tokens(4, 500));  // block 2
  ReleaseAll(pool, a);  // a's end (1) before its start (0)
  ReleaseAll(pool, b);
  EXPECT_EQ(pool.Take(), 3);  // the free one
  EXPECT_EQ(pool.Take(), 1);  // then a's end, the least recent
  EXPECT_EQ(pool.cached(), 2);
  EXPECT_EQ(pool.Match(Tokens(8, 100), 2), (std::vector<int32_t>{0}));
  EXPECT_EQ(pool.Take(), 2);  // b: block 0 is in use again
  EXPECT_EQ(pool.cached(), 1);
  EXPECT_EQ(pool.available(), 0);
}

TEST(BlockPoolTest, AChildOfAnEvictedParentGivesWayToTheNewChain) {
  BlockPool pool(5, kBlock, true);
  const std::vector<int32_t> t = Tokens(8);
  const std::vector<int32_t> first = Write(pool, t);  // 0 -> 1
  pool.Release(first[0]);  // the parent first: the least recent
  pool.Release(first[1]);
  for (int32_t want : {2, 3, 4, 0}) EXPECT_EQ(pool.Take(), want);
  for (int32_t b : {2, 3, 4, 0}) pool.Release(b);
  // Block 1, cached under the evicted parent, can no longer be reached.
  // The same tokens written again take its key, and are found whole.
  const std::vector<int32_t> again = Write(pool, t);
  EXPECT_EQ(again, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(pool.cached(), 2);
  ReleaseAll(pool, again);
  EXPECT_EQ(pool.Match(t, 2), again);
}

TEST(BlockPoolTest, AStaleChildIsNotFoundThroughARecycledParent) {
  BlockPool pool(3, kBlock, true);
  const std::vector<int32_t> t = Tokens(8);
  const std::vector<int32_t> first = Write(pool, t);  // 0 -> 1
  pool.Release(first[0]);  // the parent unused, the child still in use
  EXPECT_EQ(pool.Take(), 2);
  EXPECT_EQ(pool.Take(), 0);  // the parent evicted and taken
  // Block 0 now holds the same first tokens again, written anew: its child
  // 1 was cached under the old block 0 and must not be found through the
  // new one, although the ids and tokens are the same.
  pool.Cache({0}, 0, std::span<const int32_t>(t).subspan(0, kBlock));
  pool.Release(0);
  pool.Release(first[1]);
  EXPECT_EQ(pool.Match(t, 2), (std::vector<int32_t>{0}));
}

TEST(BlockPoolTest, ContentCachedTwiceIsKeptOnce) {
  BlockPool pool(4, kBlock, true);
  const std::vector<int32_t> a = Write(pool, Tokens(4));
  const std::vector<int32_t> b = Write(pool, Tokens(4));  // same tokens
  EXPECT_EQ(pool.cached(), 1);
  pool.Release(b[0]);
  EXPECT_EQ(pool.Take(), b[0]);  // uncached: plainly free
  EXPECT_EQ(pool.Match(Tokens(4), 1), a);
}

TEST(BlockPoolTest, ClearForgetsEveryBlock) {
  BlockPool pool(4, kBlock, true);
  const std::vector<int32_t> a = Write(pool, Tokens(8));
  pool.Release(a[1]);
  pool.Clear();
  EXPECT_EQ(pool.cached(), 0);
  EXPECT_TRUE(pool.Match(Tokens(8), 2).empty());
  pool.Release(a[0]);
  EXPECT_EQ(pool.available(), 4);
  EXPECT_TRUE(pool.Match(Tokens(8), 2).empty());
}

TEST(BlockPoolTest, WithoutCachingNothingIsKept) {
  BlockPool pool(4, kBlock, false);
  ReleaseAll(pool, Write(pool, Tokens(8)));
  EXPECT_EQ(pool.cached(), 0);
  EXPECT_TRUE(pool.Match(Tokens(8), 2).empty());
  EXPECT_EQ(pool.Take(), 0);
}

}  // namespace
}  // namespace octet
