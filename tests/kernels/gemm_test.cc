// CPU GEMMs (kernels/cpu/gemm.h) on every instruction-set level, against an
// fp64 reference on exactly decoded inputs, across the odd shapes that break
// blocking (M = 1, 3, 17, ...; K not a multiple of any vector width; N = 1).
//
// Tolerances are derived from K (testing::ExpectGemmClose).
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/fp8.h"
#include "kernels/tree_sum.h"
#include "tests/kernels/test_data.h"

namespace octet {
namespace {

using Shape = testing::GemmShape;
using testing::ExpectGemmClose;
using testing::RandomBf16;
using testing::RandomCodes;
using testing::Widen;

std::vector<Shape> OddShapes() {
  std::vector<Shape> shapes;
  for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17, 33}) {
    for (int64_t n : {1, 3, 16, 33, 67}) {
      for (int64_t k : {1, 15, 17, 33, 100, 257}) shapes.push_back({m, n, k});
    }
  }
  shapes.push_back({1, 300, 4096});
  shapes.push_back({17, 40, 1000});
  shapes.push_back({64, 96, 600});
  // Prepared rows a multiple of 4 KiB long, which the driver spaces one
  // cache line further apart (gemm.cc, PreparedStride): 2048 bfloat16 and
  // 1024 binary32 elements, with M past the streaming tiles.
  shapes.push_back({33, 40, 2048});
  shapes.push_back({20, 24, 1024});
  return shapes;
}

class GemmTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuKernelOptions Options(int threads = 1) const {
    return CpuKernelOptions{.isa = GetParam(), .num_threads = threads};
  }
};

TEST_P(GemmTest, E4m3MatchesFp64ReferenceOnOddShapes) {
  const float sa = 0.37f, sb = 1.0f / 3.0f;
  for (const Shape& s : OddShapes()) {
    const auto qa = RandomCodes(s.m * s.k, 1 + s.m * 7 + s.k);
    const auto qb = RandomCodes(s.n * s.k, 2 + s.n * 5 + s.k);
    auto a = [&](int64_t i) { return DecodeE4m3(qa[i]); };
    auto b = [&](int64_t i) { return DecodeE4m3(qb[i]); };
    std::vector<float> y(s.m * s.n, -1.0f);
    ASSERT_TRUE(GemmE4m3(qa.data(), sa, qb.data(), sb, s.m, s.n, s.k, y.data(),
                         DType::kF32, Options())
                    .ok());
    ExpectGemmClose(y, s, a, b, sa * sb, false, 0.0, "e4m3->f32");
    std::vector<Bf16> yb(s.m * s.n);
    ASSERT_TRUE(GemmE4m3(qa.data(), sa, qb.data(), sb, s.m, s.n, s.k, yb.data(),
                         DType::kBf16, Options())
                    .ok());
    ExpectGemmClose(Widen(yb), s, a, b, sa * sb, true, 0.0, "e4m3->bf16");
  }
}

TEST_P(GemmTest, Bf16MatchesFp64ReferenceOnOddShapes) {
  for (const Shape& s : OddShapes()) {
    const auto a16 = RandomBf16(s.m * s.k, 3 + s.m + s.k);
    const auto b16 = RandomBf16(s.n * s.k, 4 + s.n + s.k);
    auto a = [&](int64_t i) { return Bf16ToFloat(a16[i]); };
    auto b = [&](int64_t i) { return Bf16ToFloat(b16[i]); };
    std::vector<float> y(s.m * s.n);
    ASSERT_TRUE(GemmBf16(a16.data(), b16.data(), s.m, s.n, s.k, y.data(),
                         DType::kF32, Options())
                    .ok());
    ExpectGemmClose(y, s, a, b, 1.0, false, 0.0, "bf16->f32");
    std::vector<Bf16> yb(s.m * s.n);
    ASSERT_TRUE(GemmBf16(a16.data(), b16.data(), s.m, s.n, s.k, yb.data(),
                         DType::kBf16, Options())
                    .ok());
    ExpectGemmClose(Widen(yb), s, a, b, 1.0, true, 0.0, "bf16->bf16");
  }
}

TEST_P(GemmTest, F32ActivationsMatchFp64ReferenceOnOddShapes) {
  for (const Shape& s : OddShapes()) {
    std::vector<float> a(s.m * s.k), b32(s.n * s.k);
    const auto a16 = RandomBf16(s.m * s.k, 5 + s.m + s.k);
    const auto b16 = RandomBf16(s.n * s.k, 6 + s.n + s.k);
    // Activations with full binary32 mantissas (not just bf16 values).
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = Bf16ToFloat(a16[i]) * 1.00390625f + 1e-3f;
    for (size_t i = 0; i < b32.size(); ++i) b32[i] = Bf16ToFloat(b16[i]) / 3.0f;
    auto av = [&](int64_t i) { return a[i]; };
    std::vector<float> y(s.m * s.n);
    // Products are rounded once in binary32: one more u per term.
    ASSERT_TRUE(GemmF32(a.data(), b32.data(), DType::kF32, s.m, s.n, s.k,
                        y.data(), Options())
                    .ok());
    ExpectGemmClose(
        y, s, av, [&](int64_t i) { return b32[i]; }, 1.0, false, 0x1p-24,
        "f32 x f32");
    ASSERT_TRUE(GemmF32(a.data(), b16.data(), DType::kBf16, s.m, s.n, s.k,
                        y.data(), Options())
                    .ok());
    ExpectGemmClose(
        y, s, av, [&](int64_t i) { return Bf16ToFloat(b16[i]); }, 1.0, false,
        0x1p-24, "f32 x bf16");
  }
  float x = 1.0f;
  EXPECT_EQ(GemmF32(&x, &x, DType::kE4m3, 1, 1, 1, &x, Options()).code(),
            absl::StatusCode::kInvalidArgument);
}

// The unquantized GEMM over bfloat16 weights is GemmBf16 of the activations
// rounded to bfloat16, nearest even (ties included), bit for bit.
TEST_P(GemmTest, RoundedBf16IsGemmBf16OfTheRoundedActivations) {
  std::vector<Shape> shapes = OddShapes();
  shapes.push_back({40, 19, 3000});  // K in chunks, M past the tiles
  for (const Shape& s : shapes) {
    const auto a16 = RandomBf16(s.m * s.k, 7 + s.m + s.k);
    const auto b16 = RandomBf16(s.n * s.k, 8 + s.n + s.k);
    std::vector<float> a(s.m * s.k);
    std::vector<Bf16> rounded(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      // Every third value a tie (half a bfloat16 step above one), the rest
      // with full binary32 mantissas.
      const uint32_t bits = std::bit_cast<uint32_t>(Bf16ToFloat(a16[i]));
      a[i] = i % 3 == 0 ? std::bit_cast<float>(bits | 0x8000u)
                        : Bf16ToFloat(a16[i]) * 1.00390625f + 1e-3f;
      rounded[i] = FloatToBf16(a[i]);
    }
    std::vector<float> want(s.m * s.n), got(s.m * s.n);
    ASSERT_TRUE(GemmBf16(rounded.data(), b16.data(), s.m, s.n, s.k, want.data(),
                         DType::kF32, Options())
                    .ok());
    ASSERT_TRUE(GemmRoundedBf16BlockSums(a.data(), b16.data(), s.m, s.n, s.k, 1,
                                         got.data(), Options(2))
                    .ok());
    for (int64_t i = 0; i < s.m * s.n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(want[i]),
                std::bit_cast<uint32_t>(got[i]))
          << "M=" << s.m << " N=" << s.n << " K=" << s.k << " at " << i;
    }
  }
  float x = 1.0f;
  const Bf16 w = FloatToBf16(1.0f);
  EXPECT_EQ(
      GemmRoundedBf16BlockSums(nullptr, &w, 1, 1, 1, 1, &x, Options()).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GemmRoundedBf16BlockSums(&x, &w, -1, 1, 1, 1, &x, Options()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(GemmTest, ThreadCountDoesNotChangeResults) {
  for (const Shape& s :
       {Shape{1, 1000, 777}, Shape{5, 333, 129}, Shape{40, 700, 600}}) {
    const auto qa = RandomCodes(s.m * s.k, 11);
    const auto qb = RandomCodes(s.n * s.k, 12);
    std::vector<float> one(s.m * s.n), two(s.m * s.n);
    ASSERT_TRUE(GemmE4m3(qa.data(), 0.5f, qb.data(), 0.25f, s.m, s.n, s.k,
                         one.data(), DType::kF32, Options(1))
                    .ok());
    ASSERT_TRUE(GemmE4m3(qa.data(), 0.5f, qb.data(), 0.25f, s.m, s.n, s.k,
                         two.data(), DType::kF32, Options(2))
                    .ok());
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(one[i]),
                std::bit_cast<uint32_t>(two[i]))
          << "M=" << s.m << " element " << i;
    }
  }
}

TEST_P(GemmTest, RowScalesGiveEachRowWhatItGetsAlone) {
  // One activation scale per row (batched sequences): every row of the batch
  // is bit for bit the single-row GEMM with that row's scale, on both the
  // streaming (M <= 8) and the converted-weights path, in f32 and bf16.
  for (const Shape& s : {Shape{1, 67, 100}, Shape{3, 33, 257},
                         Shape{9, 40, 1000}, Shape{33, 96, 600}}) {
    const auto qa = RandomCodes(s.m * s.k, 31 + s.m);
    const auto qb = RandomCodes(s.n * s.k, 32 + s.m);
    std::vector<float> row_scales(s.m);
    for (int64_t r = 0; r < s.m; ++r) row_scales[r] = 0.01f * (r + 1) + 0.003f;
    const float sb = 0.37f;
    for (DType y_dtype : {DType::kF32, DType::kBf16}) {
      const size_t size = DTypeSize(y_dtype);
      std::vector<uint8_t> batched(s.m * s.n * size), alone(s.n * size);
      ASSERT_TRUE(GemmE4m3RowScales(qa.data(), row_scales.data(), qb.data(), sb,
                                    s.m, s.n, s.k, batched.data(), y_dtype,
                                    Options(2))
                      .ok());
      for (int64_t r = 0; r < s.m; ++r) {
        ASSERT_TRUE(GemmE4m3(qa.data() + r * s.k, row_scales[r], qb.data(), sb,
                             1, s.n, s.k, alone.data(), y_dtype, Options())
                        .ok());
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(),
                               batched.begin() + r * s.n * size))
            << "M=" << s.m << " row " << r << " " << DTypeName(y_dtype);
      }
    }
  }
  std::vector<float> y(16);
  const std::vector<uint8_t> q(64, 0x38);
  EXPECT_EQ(GemmE4m3RowScales(q.data(), nullptr, q.data(), 1.0f, 4, 4, 4,
                              y.data(), DType::kF32, Options())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Per-column weight scales (weights quantized per row: the FP8 lm_head):
// every column is bit for bit the GEMM of that weight row alone with its
// own scale, on the streaming and converted paths and with K in chunks.
TEST_P(GemmTest, ChannelScalesGiveEachColumnItsOwnScale) {
  for (const Shape& s :
       {Shape{1, 33, 100}, Shape{5, 40, 257}, Shape{20, 37, 2100}}) {
    const auto qa = RandomCodes(s.m * s.k, 81 + s.m);
    const auto qb = RandomCodes(s.n * s.k, 82 + s.m);
    std::vector<float> row_scales(s.m), col_scales(s.n);
    for (int64_t r = 0; r < s.m; ++r) row_scales[r] = 0.01f * (r + 1) + 0.003f;
    for (int64_t c = 0; c < s.n; ++c) col_scales[c] = 0.02f * (c + 3) + 0.001f;
    for (DType y_dtype : {DType::kF32, DType::kBf16}) {
      const size_t size = DTypeSize(y_dtype);
      std::vector<uint8_t> all(s.m * s.n * size), one(s.m * size);
      ASSERT_TRUE(GemmE4m3ChannelScales(qa.data(), row_scales.data(), qb.data(),
                                        col_scales.data(), s.m, s.n, s.k,
                                        all.data(), y_dtype, Options(2))
                      .ok());
      for (int64_t c = 0; c < s.n; ++c) {
        ASSERT_TRUE(GemmE4m3RowScales(qa.data(), row_scales.data(),
                                      qb.data() + c * s.k, col_scales[c], s.m,
                                      1, s.k, one.data(), y_dtype, Options())
                        .ok());
        for (int64_t r = 0; r < s.m; ++r) {
          ASSERT_TRUE(std::equal(one.begin() + r * size,
                                 one.begin() + (r + 1) * size,
                                 all.begin() + (r * s.n + c) * size))
              << "M=" << s.m << " K=" << s.k << " row " << r << " col " << c
              << " " << DTypeName(y_dtype);
        }
      }
    }
  }
  std::vector<float> y(16), scales(4, 1.0f);
  const std::vector<uint8_t> q(64, 0x38);
  EXPECT_EQ(GemmE4m3ChannelScales(q.data(), scales.data(), q.data(), nullptr, 4,
                                  4, 4, y.data(), DType::kF32, Options())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Long K (past rows_tiling.h's 4096-element chunks), where the AVX-512
// kernels walk K in chunks once there are more activation rows than one
// tile holds, keeping each tile's vector sums between chunks: every row of
// a batch is still bit for bit the row alone, for e4m3 (streaming tiles of
// 4 and 8 rows, converted weights) and bfloat16 weights.
TEST_P(GemmTest, RowsDoNotDependOnTheBatchWhenKIsChunked) {
  for (const Shape& s :
       {Shape{6, 37, 5000}, Shape{12, 37, 4100}, Shape{16, 20, 8192},
        Shape{17, 37, 4500}, Shape{40, 19, 9000}, Shape{120, 9, 4500}}) {
    const auto qa = RandomCodes(s.m * s.k, 71 + s.m);
    const auto qb = RandomCodes(s.n * s.k, 72 + s.m);
    const auto a16 = RandomBf16(s.m * s.k, 73 + s.m);
    const auto b16 = RandomBf16(s.n * s.k, 74 + s.m);
    std::vector<float> scales(s.m, 0.25f);
    std::vector<float> batched(s.m * s.n), alone(s.n);
    ASSERT_TRUE(GemmE4m3RowScales(qa.data(), scales.data(), qb.data(), 0.5f,
                                  s.m, s.n, s.k, batched.data(), DType::kF32,
                                  Options(2))
                    .ok());
    for (int64_t r = 0; r < s.m; ++r) {
      ASSERT_TRUE(GemmE4m3(qa.data() + r * s.k, 0.25f, qb.data(), 0.5f, 1, s.n,
                           s.k, alone.data(), DType::kF32, Options())
                      .ok());
      for (int64_t j = 0; j < s.n; ++j) {
        ASSERT_EQ(std::bit_cast<uint32_t>(alone[j]),
                  std::bit_cast<uint32_t>(batched[r * s.n + j]))
            << "e4m3 M=" << s.m << " K=" << s.k << " row " << r << " col " << j;
      }
    }
    ASSERT_TRUE(GemmBf16(a16.data(), b16.data(), s.m, s.n, s.k, batched.data(),
                         DType::kF32, Options(2))
                    .ok());
    for (int64_t r = 0; r < s.m; ++r) {
      ASSERT_TRUE(GemmBf16(a16.data() + r * s.k, b16.data(), 1, s.n, s.k,
                           alone.data(), DType::kF32, Options())
                      .ok());
      for (int64_t j = 0; j < s.n; ++j) {
        ASSERT_EQ(std::bit_cast<uint32_t>(alone[j]),
                  std::bit_cast<uint32_t>(batched[r * s.n + j]))
            << "bf16 M=" << s.m << " K=" << s.k << " row " << r << " col " << j;
      }
    }
  }
}

// Columns [begin, end) of the row-major [rows][k] matrix m: one rank's K.
template <typename T>
std::vector<T> KSlice(const std::vector<T>& m, int64_t rows, int64_t k,
                      int64_t begin, int64_t end) {
  std::vector<T> out;
  for (int64_t r = 0; r < rows; ++r) {
    out.insert(out.end(), m.begin() + r * k + begin, m.begin() + r * k + end);
  }
  return out;
}

// What tensor parallelism relies on (kernels/tree_sum.h): K in 8 blocks on
// one rank gives the same bits as K cut across T ranks, each summing its
// 8 / T blocks, then TreeSum over the ranks; on both e4m3 paths (streaming,
// M <= 8, and converted) and for block lengths that are not a multiple of
// any vector width; and every row of the batch is what it is alone.
TEST_P(GemmTest, BlockSumsDoNotChangeWhenKIsSplitAcrossRanks) {
  constexpr int64_t kBlocks = 8;
  for (const Shape& s :
       {Shape{1, 67, 8 * 2}, Shape{3, 33, 8 * 5}, Shape{9, 40, 8 * 16},
        Shape{33, 67, 8 * 100}, Shape{1, 300, 8 * 256}}) {
    const auto qa = RandomCodes(s.m * s.k, 41 + s.k);
    const auto qb = RandomCodes(s.n * s.k, 42 + s.k);
    const auto wb = RandomBf16(s.n * s.k, 43 + s.k);
    std::vector<float> a(s.m * s.k);
    for (size_t i = 0; i < a.size(); ++i) a[i] = DecodeE4m3(qa[i]) * 0.7f;
    std::vector<float> whole(s.m * s.n), whole_f32(s.m * s.n),
        whole_rounded(s.m * s.n);
    ASSERT_TRUE(GemmE4m3BlockSums(qa.data(), qb.data(), s.m, s.n, s.k, kBlocks,
                                  whole.data(), Options(2))
                    .ok());
    ASSERT_TRUE(GemmF32BlockSums(a.data(), wb.data(), DType::kBf16, s.m, s.n,
                                 s.k, kBlocks, whole_f32.data(), Options(2))
                    .ok());
    ASSERT_TRUE(GemmRoundedBf16BlockSums(a.data(), wb.data(), s.m, s.n, s.k,
                                         kBlocks, whole_rounded.data(),
                                         Options(2))
                    .ok());
    // Each row as it comes alone (the streaming path): a batch with more
    // rows than stream there converts the weights, the first rows' kernel
    // writing the converted blocks and the rest reading them.
    for (int64_t r = 0; r < s.m; ++r) {
      std::vector<float> alone(s.n);
      ASSERT_TRUE(GemmE4m3BlockSums(qa.data() + r * s.k, qb.data(), 1, s.n, s.k,
                                    kBlocks, alone.data(), Options())
                      .ok());
      for (int64_t j = 0; j < s.n; ++j) {
        ASSERT_EQ(std::bit_cast<uint32_t>(alone[j]),
                  std::bit_cast<uint32_t>(whole[r * s.n + j]))
            << "e4m3 M=" << s.m << " K=" << s.k << " row " << r << " col " << j;
      }
    }
    for (int64_t ranks : {2, 4, 8}) {
      const int64_t k_rank = s.k / ranks;
      std::vector<float> parts(ranks * s.m * s.n), parts_f32(parts.size()),
          parts_rounded(parts.size());
      for (int64_t r = 0; r < ranks; ++r) {
        const int64_t begin = r * k_rank, end = begin + k_rank;
        const auto qa_r = KSlice(qa, s.m, s.k, begin, end);
        const auto qb_r = KSlice(qb, s.n, s.k, begin, end);
        ASSERT_TRUE(GemmE4m3BlockSums(qa_r.data(), qb_r.data(), s.m, s.n,
                                      k_rank, kBlocks / ranks,
                                      parts.data() + r * s.m * s.n, Options())
                        .ok());
        const auto a_r = KSlice(a, s.m, s.k, begin, end);
        const auto wb_r = KSlice(wb, s.n, s.k, begin, end);
        ASSERT_TRUE(GemmF32BlockSums(a_r.data(), wb_r.data(), DType::kBf16, s.m,
                                     s.n, k_rank, kBlocks / ranks,
                                     parts_f32.data() + r * s.m * s.n,
                                     Options())
                        .ok());
        ASSERT_TRUE(GemmRoundedBf16BlockSums(
                        a_r.data(), wb_r.data(), s.m, s.n, k_rank,
                        kBlocks / ranks, parts_rounded.data() + r * s.m * s.n,
                        Options())
                        .ok());
      }
      TreeSum(parts.data(), ranks, s.m * s.n, s.m * s.n);
      TreeSum(parts_f32.data(), ranks, s.m * s.n, s.m * s.n);
      TreeSum(parts_rounded.data(), ranks, s.m * s.n, s.m * s.n);
      for (int64_t i = 0; i < s.m * s.n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(whole[i]),
                  std::bit_cast<uint32_t>(parts[i]))
            << "e4m3 M=" << s.m << " K=" << s.k << " TP=" << ranks << " at "
            << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(whole_f32[i]),
                  std::bit_cast<uint32_t>(parts_f32[i]))
            << "f32 M=" << s.m << " K=" << s.k << " TP=" << ranks << " at "
            << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(whole_rounded[i]),
                  std::bit_cast<uint32_t>(parts_rounded[i]))
            << "rounded bf16 M=" << s.m << " K=" << s.k << " TP=" << ranks
            << " at " << i;
      }
    }
    // Scaled afterwards, one block is the plain GEMM.
    const float sa = 0.37f, sb = 1.0f / 3.0f;
    std::vector<float> sums(s.m * s.n), y(s.m * s.n);
    ASSERT_TRUE(GemmE4m3BlockSums(qa.data(), qb.data(), s.m, s.n, s.k, 1,
                                  sums.data(), Options())
                    .ok());
    ASSERT_TRUE(GemmE4m3(qa.data(), sa, qb.data(), sb, s.m, s.n, s.k, y.data(),
                         DType::kF32, Options())
                    .ok());
    for (int64_t i = 0; i < s.m * s.n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(sums[i] * (sa * sb)),
                std::bit_cast<uint32_t>(y[i]))
          << "M=" << s.m << " K=" << s.k << " at " << i;
    }
  }
  std::vector<float> y(16);
  const std::vector<uint8_t> q(40, 0x38);
  for (int64_t blocks : {0, 3}) {
    EXPECT_EQ(GemmE4m3BlockSums(q.data(), q.data(), 1, 1, 10, blocks, y.data(),
                                Options())
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << blocks;
  }
}

// Block sums are each block's GEMM alone, added in TreeSum order, however
// the kernels get there: a tile adding its own blocks (AVX-512), more
// blocks than a tile holds (40), blocks longer than a K chunk (4160, with
// rows for several row groups), on the streaming and the converted e4m3
// paths (M = 13 and 40), over two threads.
TEST_P(GemmTest, BlockSumsAreTheTreeSumOfEachBlockAlone) {
  struct Case {
    Shape s;
    int64_t blocks;
  };
  for (const Case& c : {Case{{5, 19, 40 * 3}, 40}, Case{{20, 21, 36 * 5}, 36},
                        Case{{3, 35, 8 * 24}, 8}, Case{{13, 9, 2 * 4160}, 2},
                        Case{{40, 9, 2 * 4160}, 2}}) {
    const Shape& s = c.s;
    const int64_t kb = s.k / c.blocks;
    const auto qa = RandomCodes(s.m * s.k, 51 + s.k);
    const auto qb = RandomCodes(s.n * s.k, 52 + s.k);
    const auto wb = RandomBf16(s.n * s.k, 53 + s.k);
    std::vector<float> a(s.m * s.k);
    for (size_t i = 0; i < a.size(); ++i) a[i] = DecodeE4m3(qa[i]) * 0.3f;
    const int64_t mn = s.m * s.n;
    std::vector<float> e4m3(mn), rounded(mn), e4m3_parts(c.blocks * mn),
        rounded_parts(c.blocks * mn);
    ASSERT_TRUE(GemmE4m3BlockSums(qa.data(), qb.data(), s.m, s.n, s.k, c.blocks,
                                  e4m3.data(), Options(2))
                    .ok());
    ASSERT_TRUE(GemmRoundedBf16BlockSums(a.data(), wb.data(), s.m, s.n, s.k,
                                         c.blocks, rounded.data(), Options(2))
                    .ok());
    for (int64_t j = 0; j < c.blocks; ++j) {
      const auto qa_j = KSlice(qa, s.m, s.k, j * kb, (j + 1) * kb);
      const auto qb_j = KSlice(qb, s.n, s.k, j * kb, (j + 1) * kb);
      const auto a_j = KSlice(a, s.m, s.k, j * kb, (j + 1) * kb);
      const auto wb_j = KSlice(wb, s.n, s.k, j * kb, (j + 1) * kb);
      ASSERT_TRUE(GemmE4m3BlockSums(qa_j.data(), qb_j.data(), s.m, s.n, kb, 1,
                                    e4m3_parts.data() + j * mn, Options())
                      .ok());
      ASSERT_TRUE(GemmRoundedBf16BlockSums(a_j.data(), wb_j.data(), s.m, s.n,
                                           kb, 1, rounded_parts.data() + j * mn,
                                           Options())
                      .ok());
    }
    TreeSum(e4m3_parts.data(), c.blocks, mn, mn);
    TreeSum(rounded_parts.data(), c.blocks, mn, mn);
    for (int64_t i = 0; i < mn; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(e4m3[i]),
                std::bit_cast<uint32_t>(e4m3_parts[i]))
          << "e4m3 M=" << s.m << " K=" << s.k << " in " << c.blocks
          << " blocks, at " << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]),
                std::bit_cast<uint32_t>(rounded_parts[i]))
          << "rounded bf16 M=" << s.m << " K=" << s.k << " in " << c.blocks
          << " blocks, at " << i;
    }
  }
}

TEST_P(GemmTest, NanCodesPropagate) {
  for (const Shape& s : {Shape{1, 9, 40}, Shape{3, 5, 33}, Shape{20, 37, 70}}) {
    auto qa = RandomCodes(s.m * s.k, 21);
    auto qb = RandomCodes(s.n * s.k, 22);
    qa[0 * s.k + s.k - 1] = 0x7F;    // row 0 of A, last element
    qb[(s.n - 1) * s.k + 0] = 0xFF;  // last row of B (output column n-1)
    std::vector<float> y(s.m * s.n);
    ASSERT_TRUE(GemmE4m3(qa.data(), 1.0f, qb.data(), 1.0f, s.m, s.n, s.k,
                         y.data(), DType::kF32, Options())
                    .ok());
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        EXPECT_EQ(std::isnan(y[i * s.n + j]), i == 0 || j == s.n - 1)
            << "M=" << s.m << " (" << i << "," << j << ")";
      }
    }
  }
}

TEST_P(GemmTest, EmptyShapes) {
  const std::vector<uint8_t> q(64, 0x38);
  std::vector<float> y(16, -1.0f);
  ASSERT_TRUE(GemmE4m3(q.data(), 1.0f, q.data(), 1.0f, 4, 4, 0, y.data(),
                       DType::kF32, Options())
                  .ok());
  for (float v : y) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(GemmE4m3(nullptr, 1.0f, nullptr, 1.0f, 0, 0, 5, nullptr,
                       DType::kF32, Options())
                  .ok());
}

TEST_P(GemmTest, BadArgumentsAreErrors) {
  const std::vector<uint8_t> q(64, 0x38);
  std::vector<float> y(16);
  EXPECT_EQ(GemmE4m3(q.data(), 1.0f, q.data(), 1.0f, -1, 4, 4, y.data(),
                     DType::kF32, Options())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GemmE4m3(q.data(), 1.0f, q.data(), 1.0f, 4, 4, 4, y.data(),
                     DType::kE4m3, Options())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GemmE4m3(nullptr, 1.0f, q.data(), 1.0f, 4, 4, 4, y.data(),
                     DType::kF32, Options())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

std::string IsaName(const ::testing::TestParamInfo<CpuIsa>& info) {
  return std::string(CpuIsaName(info.param));
}

INSTANTIATE_TEST_SUITE_P(EveryCpuIsa, GemmTest,
                         ::testing::ValuesIn(SupportedCpuIsas()), IsaName);

}  // namespace
}  // namespace octet
