// The CPU attention kernel (kernels/cpu/attention.h) against its scalar
// reference, AttentionRef: within rounding on shapes that take every path
// (head_dim a multiple of 16 or not, query heads per KV head 1 to 8, sliding
// windows, paged caches, several sequences, prompts and decodes together),
// and bit for bit against itself wherever a token's company changes: alone
// or batched, prefilled or decoded, cut into pieces for the threads or not,
// and at every instruction-set level this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/attention_inputs.h"
#include "tests/status_util.h"

namespace octet {
namespace {

struct Shape {
  int64_t heads, kv_heads, head_dim, block_size, window;
};

// A paged cache holding random keys and values, and the queries of a
// batch: sequence s has `counts[s]` new tokens ending at position
// `ends[s] - 1`; its blocks are scattered over the cache.
struct Batch : testing::AttentionInputs {
  Shape shape;
  std::vector<float> Run(const CpuKernelOptions& options) const {
    std::vector<float> out(positions.size() * q_stride());
    const absl::Status s =
        cpu::Attention(q.data(), q_stride(), heads, kv_heads, head_dim, Meta(),
                       k.data(), v.data(), out.data(), options);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  std::vector<float> Reference() const {
    std::vector<float> out(positions.size() * q_stride());
    cpu::AttentionRef(q.data(), q_stride(), heads, kv_heads, head_dim, Meta(),
                      k.data(), v.data(), out.data(), 1);
    return out;
  }
};

// The cache is the same for every batch of one (shape, seed): sequence s's
// position j lives at a slot that depends only on (s, j).
constexpr int64_t kMaxContext = 128;
Batch MakeBatch(const Shape& shape, const std::vector<int64_t>& ends,
                const std::vector<int64_t>& counts, uint32_t seed) {
  Batch b;
  b.shape = shape;
  b.heads = shape.heads;
  b.kv_heads = shape.kv_heads;
  b.head_dim = shape.head_dim;
  b.block_size = shape.block_size;
  b.window = shape.window;
  EXPECT_LE(*std::max_element(ends.begin(), ends.end()), kMaxContext);
  b.max_blocks = (kMaxContext + shape.block_size - 1) / shape.block_size;
  const int64_t seqs = 4;  // table rows, whatever the batch holds
  const int64_t blocks = seqs * b.max_blocks;
  const int64_t width = shape.kv_heads * shape.head_dim;
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  b.k.resize(blocks * shape.block_size * width);
  b.v.resize(b.k.size());
  for (float& x : b.k) x = normal(gen);
  for (float& x : b.v) x = normal(gen);
  // Block i of sequence s is cache block (i * seqs + 3 * s + 1) % blocks.
  b.tables.resize(seqs * b.max_blocks);
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t i = 0; i < b.max_blocks; ++i) {
      b.tables[s * b.max_blocks + i] =
          static_cast<int32_t>((i * seqs + 3 * s + 1) % blocks);
    }
  }
  std::mt19937 qgen(seed + 1);
  for (size_t s = 0; s < ends.size(); ++s) {
    for (int64_t j = ends[s] - counts[s]; j < ends[s]; ++j) {
      b.positions.push_back(static_cast<int32_t>(j));
      b.token_seq.push_back(static_cast<int32_t>(s));
      b.slots.push_back(b.tables[s * b.max_blocks + j / shape.block_size] *
                            shape.block_size +
                        j % shape.block_size);
      // A query depends only on (sequence, position).
      std::mt19937 g(seed * 7919 + s * 131 + j);
      for (int64_t x = 0; x < shape.heads * shape.head_dim; ++x) {
        b.q.push_back(normal(g));
      }
    }
  }
  return b;
}

// Rows of token (s, position) in `out` of batch b.
std::vector<float> RowOf(const Batch& b, const std::vector<float>& out,
                         int32_t seq, int32_t position) {
  const int64_t w = b.shape.heads * b.shape.head_dim;
  for (size_t t = 0; t < b.positions.size(); ++t) {
    if (b.token_seq[t] == seq && b.positions[t] == position) {
      return std::vector<float>(out.begin() + t * w, out.begin() + (t + 1) * w);
    }
  }
  ADD_FAILURE() << "no token (" << seq << ", " << position << ")";
  return {};
}

const Shape kShapes[] = {
    {32, 8, 64, 16, 0},  // llama-1b: 4 heads per KV head
    {9, 3, 64, 8, 0},    // SmolLM2: 3 per KV head
    {8, 8, 80, 4, 0},    // one per KV head; head_dim not a multiple of 16
    {10, 2, 24, 16, 7},  // 5 per KV head (4 + 1), a sliding window
    {16, 2, 128, 16, 33},
};

std::vector<CpuIsa> Levels() {
  std::vector<CpuIsa> levels;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuIsaSupported(isa)) levels.push_back(isa);
  }
  return levels;
}

TEST(CpuAttention, MatchesTheReferenceWithinRounding) {
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(::testing::Message()
                 << shape.heads << "/" << shape.kv_heads << " heads, head_dim "
                 << shape.head_dim << ", window " << shape.window);
    // A prompt of 70, one of 17 after 20 cached, and two decodes.
    const Batch b = MakeBatch(shape, {70, 37, 5, 90}, {70, 17, 1, 1}, 3);
    const std::vector<float> want = b.Reference();
    for (CpuIsa isa : Levels()) {
      const std::vector<float> got = b.Run({.isa = isa, .num_threads = 2});
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        // Outputs are averages of N(0, 1) values: 2^-18 absolute is far
        // above both sides' rounding and far below any wrong weight.
        worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
      }
      EXPECT_LT(worst, 0x1p-18) << CpuIsaName(isa);
    }
  }
}

TEST(CpuAttention, ATokensRowDoesNotDependOnItsCompany) {
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(::testing::Message() << shape.heads << "/" << shape.kv_heads
                                      << " heads, head_dim " << shape.head_dim);
    for (CpuIsa isa : Levels()) {
      for (int threads : {1, 2}) {
        const CpuKernelOptions o{.isa = isa, .num_threads = threads};
        // Sequence 0's tokens 30..39: prefilled with 30 more before them,
        // as the last ten of a forward with another sequence, and decoded
        // one at a time alone.
        const Batch whole = MakeBatch(shape, {40}, {40}, 5);
        const Batch tail = MakeBatch(shape, {40, 60}, {10, 25}, 5);
        const std::vector<float> a = whole.Run(o), b = tail.Run(o);
        for (int32_t p = 30; p < 40; ++p) {
          const Batch one = MakeBatch(shape, {p + 1}, {1}, 5);
          const std::vector<float> c = one.Run(o);
          EXPECT_EQ(RowOf(whole, a, 0, p), RowOf(tail, b, 0, p)) << p;
          EXPECT_EQ(RowOf(whole, a, 0, p), RowOf(one, c, 0, p)) << p;
        }
      }
    }
  }
}

TEST(CpuAttention, EveryLevelGivesTheSameBits) {
  const std::vector<CpuIsa> levels = Levels();
  if (levels.size() < 2) GTEST_SKIP() << "one vector level on this CPU";
  for (const Shape& shape : kShapes) {
    const Batch b = MakeBatch(shape, {70, 37, 5, 90}, {70, 17, 1, 1}, 9);
    EXPECT_EQ(b.Run({.isa = levels[0], .num_threads = 2}),
              b.Run({.isa = levels[1], .num_threads = 2}))
        << shape.head_dim;
  }
}

}  // namespace
}  // namespace octet
