// The outer-product GEMMs over bfloat16 and e4m3 panels
// (kernels/cpu/panels.h; GemmBf16Panels, GemmRoundedBf16PanelBlockSums and
// GemmE4m3Panel* in gemm.h) on every instruction-set level: the packing holds
// every weight where the layout says, the products are within the binary32
// bound of a binary64 reference, and the sums keep the contracts octet relies
// on: a row's bits do not depend on the batch, the thread count or the columns
// packed beside it, and K blocks are each block alone added in TreeSum order,
// so K cut across ranks gives one rank's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/panels.h"
#include "kernels/fp8.h"
#include "kernels/tree_sum.h"
#include "tests/kernels/test_data.h"

namespace octet {
namespace {

using Shape = testing::GemmShape;
using testing::ExpectGemmClose;
using testing::RandomBf16;
using testing::Widen;

std::vector<Bf16> Pack(const std::vector<Bf16>& w, int64_t n, int64_t k,
                       int64_t k_blocks = 1) {
  std::vector<Bf16> panels(Bf16PanelElements(n, k, k_blocks));
  EXPECT_TRUE(PackBf16Panels(w.data(), n, k, k_blocks, panels.data()).ok());
  return panels;
}

// Columns [begin, end) of the row-major [rows][k] matrix m.
template <typename T>
std::vector<T> Columns(const std::vector<T>& m, int64_t rows, int64_t k,
                       int64_t begin, int64_t end) {
  std::vector<T> out;
  for (int64_t r = 0; r < rows; ++r) {
    out.insert(out.end(), m.begin() + r * k + begin, m.begin() + r * k + end);
  }
  return out;
}

void ExpectSameBits(const std::vector<float>& want,
                    const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(want[i]), std::bit_cast<uint32_t>(got[i]))
        << what << " at " << i << ": " << want[i] << " vs " << got[i];
  }
}

// Activations with full binary32 mantissas, every third a tie of bfloat16
// rounding (half a step above a bfloat16 value).
std::vector<float> Activations(int64_t count, uint32_t seed) {
  const auto a16 = RandomBf16(count, seed);
  std::vector<float> a(count);
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(Bf16ToFloat(a16[i]));
    a[i] = i % 3 == 0 ? std::bit_cast<float>(bits | 0x8000u)
                      : Bf16ToFloat(a16[i]) * 1.00390625f + 1e-3f;
  }
  return a;
}

uint16_t Bits(Bf16 v) { return v.bits; }
uint16_t Bits(uint8_t v) { return v; }

// Both formats: every weight read back where the layout puts it, the
// padding (columns past N, the end of each K block) zero, the size the
// layout's, the same bytes packed on two threads, and unpacking gives W
// back.
template <typename T, typename Make, typename PackFn, typename UnpackFn,
          typename AtFn>
void ExpectPackingHoldsEveryWeight(Make make, int64_t step,
                                   int64_t (*size)(int64_t, int64_t, int64_t),
                                   PackFn pack, UnpackFn unpack, AtFn at,
                                   const char* what) {
  struct Case {
    int64_t k, k_blocks;
  };
  for (int64_t n : {1, 15, 16, 17, 64, 67, 130}) {
    for (const Case& c : {Case{1, 1}, Case{2, 1}, Case{7, 1}, Case{64, 1},
                          Case{15, 3}, Case{24, 4}, Case{40, 8}}) {
      const std::vector<T> w = make(n * c.k, 1 + n + c.k);
      const int64_t kb = c.k / c.k_blocks;
      const int64_t elements = size(n, c.k, c.k_blocks);
      ASSERT_EQ(elements, (n + 15) / 16 * 16 * c.k_blocks *
                              ((kb + step - 1) / step * step));
      std::vector<T> panels(elements, T{0x7F}), two(elements, T{0x7F});
      ASSERT_TRUE(pack(w.data(), n, c.k, c.k_blocks, panels.data(), 1).ok());
      ASSERT_TRUE(pack(w.data(), n, c.k, c.k_blocks, two.data(), 2).ok());
      for (int64_t i = 0; i < elements; ++i) {
        ASSERT_EQ(Bits(two[i]), Bits(panels[i]))
            << what << " on two threads N=" << n << " K=" << c.k << " at " << i;
      }
      int64_t nonzero_w = 0, nonzero_panels = 0;
      for (int64_t row = 0; row < n; ++row) {
        for (int64_t col = 0; col < c.k; ++col) {
          const T want = w[row * c.k + col];
          nonzero_w += Bits(want) != 0;
          ASSERT_EQ(Bits(at(panels.data(), n, c.k, c.k_blocks, row, col)),
                    Bits(want))
              << what << " N=" << n << " K=" << c.k << " in " << c.k_blocks
              << " blocks, W[" << row << "][" << col << "]";
        }
      }
      for (T v : panels) nonzero_panels += Bits(v) != 0;
      std::vector<T> back(n * c.k, T{0x7F});
      unpack(panels.data(), n, c.k, c.k_blocks, back.data());
      for (int64_t i = 0; i < n * c.k; ++i) {
        ASSERT_EQ(Bits(back[i]), Bits(w[i]))
            << what << " unpacked N=" << n << " K=" << c.k << " at " << i;
      }
      EXPECT_EQ(nonzero_panels, nonzero_w)
          << what << " padding not zero: N=" << n << " K=" << c.k;
    }
  }
  T w{0}, p{0};
  EXPECT_EQ(pack(&w, 1, 10, 3, &p, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pack(nullptr, 1, 2, 1, &p, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PanelsTest, PackingHoldsEveryWeightAndZeroPadding) {
  ExpectPackingHoldsEveryWeight<Bf16>(RandomBf16, 2, Bf16PanelElements,
                                      PackBf16Panels, UnpackBf16Panels,
                                      Bf16PanelAt, "bf16");
  ExpectPackingHoldsEveryWeight<uint8_t>(testing::RandomCodes, 4,
                                         E4m3PanelBytes, PackE4m3Panels,
                                         UnpackE4m3Panels, E4m3PanelAt, "e4m3");
}

class GemmPanelsTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuKernelOptions Options(int threads = 1) const {
    return CpuKernelOptions{.isa = GetParam(), .num_threads = threads};
  }
};

// Shapes that break tiling: every row-tile height and its remainders (M),
// narrow and partial panels (N), K odd, below one step and past one chunk.
std::vector<Shape> OddShapes(std::initializer_list<int64_t> ms) {
  std::vector<Shape> shapes;
  for (int64_t m : ms) {
    for (int64_t n : {1, 3, 16, 33, 67, 130}) {
      for (int64_t k : {1, 2, 15, 33, 100, 257}) shapes.push_back({m, n, k});
    }
  }
  shapes.push_back({1, 300, 4096});
  shapes.push_back({20, 70, 1100});  // K in three chunks of the AVX-512 tile
  return shapes;
}

TEST_P(GemmPanelsTest, MatchesFp64ReferenceOnOddShapes) {
  for (const Shape& s : OddShapes({1, 2, 5, 6, 7, 13, 33})) {
    const auto a16 = RandomBf16(s.m * s.k, 3 + s.m + s.k);
    const auto b16 = RandomBf16(s.n * s.k, 4 + s.n + s.k);
    const auto panels = Pack(b16, s.n, s.k);
    auto a = [&](int64_t i) { return Bf16ToFloat(a16[i]); };
    auto b = [&](int64_t i) { return Bf16ToFloat(b16[i]); };
    std::vector<float> y(s.m * s.n, -1.0f);
    ASSERT_TRUE(GemmBf16Panels(a16.data(), panels.data(), s.m, s.n, s.k,
                               y.data(), DType::kF32, Options())
                    .ok());
    ExpectGemmClose(y, s, a, b, 1.0, false, 0.0, "panels->f32");
    std::vector<Bf16> yb(s.m * s.n);
    ASSERT_TRUE(GemmBf16Panels(a16.data(), panels.data(), s.m, s.n, s.k,
                               yb.data(), DType::kBf16, Options())
                    .ok());
    ExpectGemmClose(Widen(yb), s, a, b, 1.0, true, 0.0, "panels->bf16");
  }
}

// The binary32 activations' GEMM is the GEMM of them rounded to bfloat16
// (nearest even, ties included), bit for bit.
TEST_P(GemmPanelsTest, RoundedActivationsAreTheBf16GemmOfTheirRounding) {
  for (const Shape& s :
       {Shape{1, 67, 33}, Shape{13, 130, 257}, Shape{40, 19, 1100}}) {
    const auto a = Activations(s.m * s.k, 7 + s.k);
    std::vector<Bf16> rounded(a.size());
    for (size_t i = 0; i < a.size(); ++i) rounded[i] = FloatToBf16(a[i]);
    const auto panels = Pack(RandomBf16(s.n * s.k, 8 + s.k), s.n, s.k);
    std::vector<float> want(s.m * s.n), got(s.m * s.n);
    ASSERT_TRUE(GemmBf16Panels(rounded.data(), panels.data(), s.m, s.n, s.k,
                               want.data(), DType::kF32, Options())
                    .ok());
    ASSERT_TRUE(GemmRoundedBf16PanelBlockSums(a.data(), panels.data(), s.m, s.n,
                                              s.k, 1, got.data(), Options(2))
                    .ok());
    ExpectSameBits(want, got, "M=" + std::to_string(s.m));
  }
}

// A row's bits are the same alone as in any batch (every row-tile height,
// K in chunks), on one thread or two, and a column's the same whichever
// columns are packed beside it (a column-parallel rank's slice).
TEST_P(GemmPanelsTest, RowsAndColumnsDoNotDependOnTheirNeighbours) {
  for (const Shape& s :
       {Shape{33, 130, 600}, Shape{13, 67, 1100}, Shape{7, 200, 4097}}) {
    const auto a16 = RandomBf16(s.m * s.k, 11 + s.k);
    const auto b16 = RandomBf16(s.n * s.k, 12 + s.k);
    const auto panels = Pack(b16, s.n, s.k);
    std::vector<float> batch(s.m * s.n), one_thread(s.m * s.n), row(s.n);
    ASSERT_TRUE(GemmBf16Panels(a16.data(), panels.data(), s.m, s.n, s.k,
                               batch.data(), DType::kF32, Options(2))
                    .ok());
    ASSERT_TRUE(GemmBf16Panels(a16.data(), panels.data(), s.m, s.n, s.k,
                               one_thread.data(), DType::kF32, Options(1))
                    .ok());
    ExpectSameBits(batch, one_thread, "threads, M=" + std::to_string(s.m));
    for (int64_t r = 0; r < s.m; ++r) {
      ASSERT_TRUE(GemmBf16Panels(a16.data() + r * s.k, panels.data(), 1, s.n,
                                 s.k, row.data(), DType::kF32, Options())
                      .ok());
      ExpectSameBits(
          std::vector<float>(batch.begin() + r * s.n,
                             batch.begin() + (r + 1) * s.n),
          row, "row " + std::to_string(r) + " alone, M=" + std::to_string(s.m));
    }
    const int64_t c0 = 17, c1 = s.n - 3;  // not on panel boundaries
    const std::vector<Bf16> slice(b16.begin() + c0 * s.k,
                                  b16.begin() + c1 * s.k);
    const auto slice_panels = Pack(slice, c1 - c0, s.k);
    std::vector<float> part(s.m * (c1 - c0));
    ASSERT_TRUE(GemmBf16Panels(a16.data(), slice_panels.data(), s.m, c1 - c0,
                               s.k, part.data(), DType::kF32, Options())
                    .ok());
    ExpectSameBits(
        Columns(batch, s.m, s.n, c0, c1), part,
        "columns [17, N - 3) packed alone, M=" + std::to_string(s.m));
  }
}

// Block sums are each block's GEMM alone, added in TreeSum order, for
// blocks of odd length (each padded on its own), more blocks than a tile,
// and blocks longer than a K chunk; and K cut across two ranks, each
// packing and summing its half's blocks, then TreeSum over the ranks, gives
// one rank's bits (kernels/tree_sum.h).
TEST_P(GemmPanelsTest, BlockSumsAreEachBlockAloneAndDoNotChangeAcrossRanks) {
  struct Case {
    Shape s;
    int64_t blocks;
  };
  for (const Case& c :
       {Case{{5, 19, 32 * 3}, 32}, Case{{20, 67, 8 * 5}, 8},
        Case{{3, 130, 8 * 24}, 8}, Case{{9, 21, 2 * 1100}, 2}}) {
    const Shape& s = c.s;
    const int64_t kb = s.k / c.blocks, mn = s.m * s.n;
    const auto a = Activations(s.m * s.k, 51 + s.k);
    const auto w = RandomBf16(s.n * s.k, 52 + s.k);
    std::vector<float> whole(mn), parts(c.blocks * mn);
    ASSERT_TRUE(GemmRoundedBf16PanelBlockSums(
                    a.data(), Pack(w, s.n, s.k, c.blocks).data(), s.m, s.n, s.k,
                    c.blocks, whole.data(), Options(2))
                    .ok());
    for (int64_t j = 0; j < c.blocks; ++j) {
      const auto a_j = Columns(a, s.m, s.k, j * kb, (j + 1) * kb);
      const auto w_j = Columns(w, s.n, s.k, j * kb, (j + 1) * kb);
      ASSERT_TRUE(GemmRoundedBf16PanelBlockSums(
                      a_j.data(), Pack(w_j, s.n, kb).data(), s.m, s.n, kb, 1,
                      parts.data() + j * mn, Options())
                      .ok());
    }
    TreeSum(parts.data(), c.blocks, mn, mn);
    const std::string what = "M=" + std::to_string(s.m) +
                             " K=" + std::to_string(s.k) + " in " +
                             std::to_string(c.blocks) + " blocks";
    ExpectSameBits(whole, std::vector<float>(parts.begin(), parts.begin() + mn),
                   what + ", each block alone");
    std::vector<float> ranks(2 * mn);
    for (int64_t r = 0; r < 2; ++r) {
      const int64_t half = s.k / 2;
      const auto a_r = Columns(a, s.m, s.k, r * half, (r + 1) * half);
      const auto w_r = Columns(w, s.n, s.k, r * half, (r + 1) * half);
      ASSERT_TRUE(GemmRoundedBf16PanelBlockSums(
                      a_r.data(), Pack(w_r, s.n, half, c.blocks / 2).data(),
                      s.m, s.n, half, c.blocks / 2, ranks.data() + r * mn,
                      Options())
                      .ok());
    }
    TreeSum(ranks.data(), 2, mn, mn);
    ExpectSameBits(whole, std::vector<float>(ranks.begin(), ranks.begin() + mn),
                   what + ", across two ranks");
  }
}

std::vector<uint8_t> PackCodes(const std::vector<uint8_t>& w, int64_t n,
                               int64_t k, int64_t k_blocks = 1) {
  std::vector<uint8_t> panels(E4m3PanelBytes(n, k, k_blocks));
  EXPECT_TRUE(PackE4m3Panels(w.data(), n, k, k_blocks, panels.data()).ok());
  return panels;
}

// Rows of [rows][k] with zeros appended to k_pad.
template <typename T>
std::vector<T> PadK(const std::vector<T>& m, int64_t rows, int64_t k,
                    int64_t k_pad) {
  std::vector<T> out(rows * k_pad, T{0});
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(m.begin() + r * k, m.begin() + (r + 1) * k,
              out.begin() + r * k_pad);
  }
  return out;
}

TEST_P(GemmPanelsTest, E4m3MatchesFp64ReferenceOnOddShapes) {
  for (const Shape& s : OddShapes({1, 2, 3, 4, 7, 9, 13, 33})) {
    const auto qa = testing::RandomCodes(s.m * s.k, 1 + s.m * 7 + s.k);
    const auto qb = testing::RandomCodes(s.n * s.k, 2 + s.n * 5 + s.k);
    const auto panels = PackCodes(qb, s.n, s.k);
    std::vector<float> row_scale(s.m), col_scale(s.n);
    for (int64_t r = 0; r < s.m; ++r) row_scale[r] = 0.25f + 0.125f * (r % 5);
    for (int64_t c = 0; c < s.n; ++c) col_scale[c] = 0.5f + 0.0625f * (c % 7);
    auto a = [&](int64_t i) { return DecodeE4m3(qa[i]); };
    auto b = [&](int64_t i) { return DecodeE4m3(qb[i]); };
    std::vector<float> y(s.m * s.n, -1.0f);
    ASSERT_TRUE(GemmE4m3PanelRowScales(qa.data(), row_scale.data(),
                                       panels.data(), 1.0f, s.m, s.n, s.k,
                                       y.data(), DType::kF32, Options())
                    .ok());
    // Row r's scale applied: compare the unscaled sums.
    for (int64_t r = 0; r < s.m; ++r) {
      for (int64_t c = 0; c < s.n; ++c) y[r * s.n + c] /= row_scale[r];
    }
    ExpectGemmClose(y, s, a, b, 1.0, false, 0.0, "e4m3 panels->f32");
    std::vector<Bf16> yb(s.m * s.n);
    std::vector<float> ones(s.m, 1.0f);
    ASSERT_TRUE(GemmE4m3PanelChannelScales(
                    qa.data(), ones.data(), panels.data(), col_scale.data(),
                    s.m, s.n, s.k, yb.data(), DType::kBf16, Options())
                    .ok());
    std::vector<float> unscaled = Widen(yb);
    for (int64_t r = 0; r < s.m; ++r) {
      for (int64_t c = 0; c < s.n; ++c) unscaled[r * s.n + c] /= col_scale[c];
    }
    ExpectGemmClose(unscaled, s, a, b, 1.0, true, 0.0, "e4m3 panels->bf16");
  }
}

// The e4m3 panels' GEMM is the bfloat16 panels' GEMM of the decoded codes,
// bit for bit, at every M (on AVX-512 whole panels by 4 rows up to 8 rows,
// 2 vectors by 10 rows below 64, each K chunk decoded once from 64), with K
// padded to the e4m3 step on both sides; so, like it, a row's bits do not
// depend on the batch.
TEST_P(GemmPanelsTest, E4m3IsTheBf16PanelGemmOfTheDecodedValues) {
  for (const Shape& s :
       {Shape{33, 130, 600}, Shape{13, 67, 1101}, Shape{7, 200, 4097},
        Shape{40, 19, 46}, Shape{75, 100, 1101}}) {
    const int64_t k4 = (s.k + 3) / 4 * 4;
    const auto qa = testing::RandomCodes(s.m * s.k, 61 + s.k);
    const auto qb = testing::RandomCodes(s.n * s.k, 62 + s.k);
    const auto panels = PackCodes(qb, s.n, s.k);
    std::vector<Bf16> a16(qa.size()), b16(qb.size());
    for (size_t i = 0; i < qa.size(); ++i)
      a16[i] = FloatToBf16(DecodeE4m3(qa[i]));
    for (size_t i = 0; i < qb.size(); ++i)
      b16[i] = FloatToBf16(DecodeE4m3(qb[i]));
    const auto a_pad = PadK(a16, s.m, s.k, k4);
    const auto bf16_panels = Pack(PadK(b16, s.n, s.k, k4), s.n, k4);
    const std::vector<float> ones(s.m, 1.0f);
    for (int64_t m = 1; m <= s.m; m += m < 5 ? 1 : 7) {
      std::vector<float> want(m * s.n), got(m * s.n);
      ASSERT_TRUE(GemmBf16Panels(a_pad.data(), bf16_panels.data(), m, s.n, k4,
                                 want.data(), DType::kF32, Options())
                      .ok());
      ASSERT_TRUE(GemmE4m3PanelRowScales(qa.data(), ones.data(), panels.data(),
                                         1.0f, m, s.n, s.k, got.data(),
                                         DType::kF32, Options(2))
                      .ok());
      ExpectSameBits(want, got,
                     "M=" + std::to_string(m) + " of " + std::to_string(s.m) +
                         ", K=" + std::to_string(s.k));
    }
  }
}

// Block sums over e4m3 panels are each block's GEMM alone (packed alone),
// added in TreeSum order, for blocks not a multiple of the K step and more
// blocks than a tile, with each AVX-512 e4m3 way (M = 2, 13 and 70).
TEST_P(GemmPanelsTest, E4m3BlockSumsAreEachBlockAlone) {
  struct Case {
    Shape s;
    int64_t blocks;
  };
  for (const Case& c :
       {Case{{2, 19, 32 * 3}, 32}, Case{{13, 67, 8 * 5}, 8},
        Case{{13, 130, 2 * 1100}, 2}, Case{{70, 67, 3 * 600}, 3}}) {
    const Shape& s = c.s;
    const int64_t kb = s.k / c.blocks, mn = s.m * s.n;
    const auto qa = testing::RandomCodes(s.m * s.k, 71 + s.k);
    const auto qb = testing::RandomCodes(s.n * s.k, 72 + s.k);
    std::vector<float> whole(mn), parts(c.blocks * mn);
    ASSERT_TRUE(GemmE4m3PanelBlockSums(
                    qa.data(), PackCodes(qb, s.n, s.k, c.blocks).data(), s.m,
                    s.n, s.k, c.blocks, whole.data(), Options(2))
                    .ok());
    for (int64_t j = 0; j < c.blocks; ++j) {
      const auto qa_j = Columns(qa, s.m, s.k, j * kb, (j + 1) * kb);
      const auto qb_j = Columns(qb, s.n, s.k, j * kb, (j + 1) * kb);
      ASSERT_TRUE(GemmE4m3PanelBlockSums(
                      qa_j.data(), PackCodes(qb_j, s.n, kb).data(), s.m, s.n,
                      kb, 1, parts.data() + j * mn, Options())
                      .ok());
    }
    TreeSum(parts.data(), c.blocks, mn, mn);
    ExpectSameBits(whole, std::vector<float>(parts.begin(), parts.begin() + mn),
                   "M=" + std::to_string(s.m) + " in " +
                       std::to_string(c.blocks) + " blocks");
  }
}

TEST_P(GemmPanelsTest, E4m3NanCodesPropagate) {
  for (const Shape& s : {Shape{1, 9, 40}, Shape{3, 5, 33}, Shape{20, 70, 70}}) {
    auto qa = testing::RandomCodes(s.m * s.k, 21);
    auto qb = testing::RandomCodes(s.n * s.k, 22);
    qa[0 * s.k + s.k - 1] = 0x7F;    // row 0 of A, last element
    qb[(s.n - 1) * s.k + 0] = 0xFF;  // last row of B (output column n-1)
    const std::vector<float> ones(s.m, 1.0f);
    std::vector<float> y(s.m * s.n);
    ASSERT_TRUE(GemmE4m3PanelRowScales(
                    qa.data(), ones.data(), PackCodes(qb, s.n, s.k).data(),
                    1.0f, s.m, s.n, s.k, y.data(), DType::kF32, Options())
                    .ok());
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        EXPECT_EQ(std::isnan(y[i * s.n + j]), i == 0 || j == s.n - 1)
            << "M=" << s.m << " (" << i << "," << j << ")";
      }
    }
  }
}

TEST_P(GemmPanelsTest, BadArgumentsAreErrors) {
  const std::vector<Bf16> w(64, FloatToBf16(1.0f));
  std::vector<float> x(64, 1.0f), y(64);
  EXPECT_EQ(GemmRoundedBf16PanelBlockSums(x.data(), w.data(), 1, 1, 10, 3,
                                          y.data(), Options())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GemmBf16Panels(w.data(), nullptr, 1, 1, 4, y.data(), DType::kF32,
                           Options())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GemmBf16Panels(w.data(), w.data(), 1, 1, 4, y.data(), DType::kE4m3,
                           Options())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

std::string IsaName(const ::testing::TestParamInfo<CpuIsa>& info) {
  return std::string(CpuIsaName(info.param));
}

INSTANTIATE_TEST_SUITE_P(EveryCpuIsa, GemmPanelsTest,
                         ::testing::ValuesIn(SupportedCpuIsas()), IsaName);

}  // namespace
}  // namespace octet
