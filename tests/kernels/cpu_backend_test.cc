// The CPU backend's FP8 linear steps with row groups (one activation scale
// per sequence, kernels/backend.h): each group is quantized and multiplied
// exactly as it would be alone, and malformed groups are errors. And its
// weight layouts (LayOutWeight): bfloat16 weights become panels where the
// kernels are AVX-512's, and its GEMMs over them are the panel GEMM's.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/panels.h"
#include "kernels/cpu/quantize.h"
#include "kernels/fp8.h"
#include "tests/kernels/test_data.h"

namespace octet {
namespace {

class CpuBackendTest : public ::testing::Test {
 protected:
  // An e4m3 weight [out][in] with scale 0.02 on the backend.
  LinearWeight Weight(int64_t out, int64_t in) {
    LinearWeight w;
    w.out = out;
    w.in = in;
    w.dtype = DType::kE4m3;
    w.data = *backend_->Allocate(out * in);
    const std::vector<uint8_t> codes = testing::RandomCodes(out * in, 5);
    std::copy(codes.begin(), codes.end(), w.data.as<uint8_t>());
    w.scale = *backend_->Allocate(sizeof(float));
    *w.scale.as<float>() = 0.02f;
    return w;
  }

  std::unique_ptr<Backend> backend_ = NewCpuBackend();
};

TEST_F(CpuBackendTest, EachGroupIsQuantizedAndMultipliedAsIfAlone) {
  const int64_t in = 100, out = 24;
  const std::vector<int32_t> seq = {0, 0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  const int64_t rows = static_cast<int64_t>(seq.size()), groups = 3;
  const std::vector<int64_t> first = {0, 2, 3, 12};
  std::vector<float> x(rows * in);
  for (int64_t i = 0; i < rows * in; ++i) {
    x[i] = static_cast<float>((i * 37) % 101 - 50) * (1.0f + (i / in) * 3.0f);
  }
  const LinearWeight w = Weight(out, in);
  const RowGroups g{groups, seq.data()};
  std::vector<float> absmax(groups), scale(groups), y(rows * out);
  std::vector<uint8_t> q(rows * in);
  ASSERT_TRUE(backend_->AbsMax(x.data(), rows, in, g, absmax.data()).ok());
  ASSERT_TRUE(backend_
                  ->Quantize(x.data(), rows, in, g, absmax.data(), q.data(),
                             scale.data())
                  .ok());
  ASSERT_TRUE(
      backend_->GemmE4m3(q.data(), scale.data(), g, rows, w, y.data()).ok());
  for (int64_t s = 0; s < groups; ++s) {
    const int64_t r0 = first[s], n = first[s + 1] - first[s];
    const float* xs = x.data() + r0 * in;
    const float want_absmax = *AbsMax(xs, n * in);
    EXPECT_EQ(absmax[s], want_absmax) << "group " << s;
    const E4m3Scale want = E4m3ScaleFromAbsmax(want_absmax);
    EXPECT_EQ(scale[s], want.scale) << "group " << s;
    std::vector<uint8_t> alone_q(n * in);
    ASSERT_TRUE(QuantizeE4m3(xs, n * in, want.inv, alone_q.data()).ok());
    EXPECT_TRUE(std::equal(alone_q.begin(), alone_q.end(), q.begin() + r0 * in))
        << "group " << s;
    std::vector<float> alone_y(n * out);
    ASSERT_TRUE(GemmE4m3(alone_q.data(), want.scale, w.data.as<uint8_t>(),
                         0.02f, n, out, in, alone_y.data(), DType::kF32)
                    .ok());
    EXPECT_TRUE(
        std::equal(alone_y.begin(), alone_y.end(), y.begin() + r0 * out))
        << "group " << s;
  }
  EXPECT_NE(scale[0], scale[2]);  // the groups really differ
}

TEST_F(CpuBackendTest, MalformedGroupsAreErrors) {
  const int64_t rows = 4, in = 16;
  std::vector<float> x(rows * in, 1.0f), absmax(4);
  const std::vector<std::vector<int32_t>> bad = {
      {1, 1, 2, 2},  // does not start at 0
      {0, 2, 2, 2},  // skips group 1
      {0, 1, 0, 1},  // not consecutive
      {0, 0, 1, 1},  // covers 2 of 3 groups
  };
  for (const auto& map : bad) {
    absl::Status s =
        backend_->AbsMax(x.data(), rows, in, {3, map.data()}, absmax.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  EXPECT_EQ(
      backend_->AbsMax(x.data(), rows, in, {2, nullptr}, absmax.data()).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->AbsMax(x.data(), rows, in, {5, bad[0].data()}, absmax.data())
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      backend_->AbsMax(x.data(), rows, in, {0, nullptr}, absmax.data()).code(),
      absl::StatusCode::kInvalidArgument);
}

// A bfloat16 weight [out][in] on `backend`.
LinearWeight Bf16Weight(Backend& backend, const std::vector<Bf16>& values,
                        int64_t out, int64_t in) {
  LinearWeight w;
  w.out = out;
  w.in = in;
  w.dtype = DType::kBf16;
  w.data = *backend.Allocate(out * in * sizeof(Bf16));
  std::copy(values.begin(), values.end(), w.data.as<Bf16>());
  return w;
}

// On every level: AVX-512 packs a bfloat16 weight into panels for its K
// blocks and its GEMMs are then GemmRoundedBf16PanelBlockSums over them, bit
// for bit, also with blocks of even length it was not packed for; the
// other levels keep rows. Binary32 and e4m3 weights keep rows everywhere.
TEST(CpuBackendLayout, Bf16WeightsBecomePanelsOnAvx512) {
  const int64_t out = 70, in = 96, rows = 5;
  const std::vector<Bf16> values = testing::RandomBf16(out * in, 3);
  std::vector<float> x(rows * in);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * float(i % 97) - 0.4f;
  for (CpuIsa isa : SupportedCpuIsas()) {
    const CpuKernelOptions options{.isa = isa, .num_threads = 2};
    auto backend = NewCpuBackend(options);
    LinearWeight w = Bf16Weight(*backend, values, out, in);
    ASSERT_TRUE(backend->LayOutWeight(w, 4).ok());
    if (isa != CpuIsa::kAvx512) {
      EXPECT_EQ(w.layout, LinearWeight::Layout::kRows) << CpuIsaName(isa);
      continue;
    }
    ASSERT_EQ(w.layout, LinearWeight::Layout::kBf16Panels);
    EXPECT_EQ(w.layout_k_blocks, 4);
    EXPECT_EQ(Bf16PanelAt(w.data.as<Bf16>(), out, in, 4, 69, 95).bits,
              values[69 * in + 95].bits);
    std::vector<Bf16> packed(Bf16PanelElements(out, in, 4));
    ASSERT_TRUE(PackBf16Panels(values.data(), out, in, 4, packed.data()).ok());
    for (int64_t blocks : {4, 1, 2}) {  // 24, 96, 48 long: all even
      std::vector<float> want(rows * out), got(rows * out);
      ASSERT_TRUE(GemmRoundedBf16PanelBlockSums(x.data(), packed.data(), rows,
                                                out, in, blocks, want.data(),
                                                options)
                      .ok());
      ASSERT_TRUE(
          backend->GemmBlockSums(x.data(), rows, w, blocks, got.data()).ok());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(want[i]),
                  std::bit_cast<uint32_t>(got[i]))
            << blocks << " blocks, at " << i;
      }
      if (blocks != 1) continue;
      ASSERT_TRUE(
          backend->Gemm(x.data(), rows, w, got.data(), DType::kF32).ok());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(want[i]),
                  std::bit_cast<uint32_t>(got[i]))
            << "Gemm at " << i;
      }
    }
  }
}

// e4m3 weights too: on AVX-512 they become panels, and GemmE4m3 (one
// scale, per-sequence scales, per-row weight scales) and GemmBlockSums are
// the e4m3 panel GEMMs, bit for bit; every sequence's rows are what they
// are alone.
TEST(CpuBackendLayout, E4m3WeightsBecomePanelsOnAvx512) {
  const int64_t out = 70, in = 96, rows = 7;
  const std::vector<uint8_t> codes = testing::RandomCodes(out * in, 6);
  const std::vector<uint8_t> q = testing::RandomCodes(rows * in, 7);
  const std::vector<int32_t> seq = {0, 0, 0, 1, 2, 2, 2};
  const std::vector<float> seq_scale = {0.5f, 0.75f, 1.25f};
  std::vector<float> row_scale(rows), col_scale(out);
  for (int64_t r = 0; r < rows; ++r) row_scale[r] = seq_scale[seq[r]];
  for (int64_t c = 0; c < out; ++c) col_scale[c] = 0.01f * float(1 + c % 5);
  for (CpuIsa isa : SupportedCpuIsas()) {
    const CpuKernelOptions options{.isa = isa, .num_threads = 2};
    auto backend = NewCpuBackend(options);
    for (bool per_row : {false, true}) {
      LinearWeight w;
      w.out = out;
      w.in = in;
      w.dtype = DType::kE4m3;
      w.data = *backend->Allocate(out * in);
      std::copy(codes.begin(), codes.end(), w.data.as<uint8_t>());
      w.scale_per_row = per_row;
      w.scale = *backend->Allocate((per_row ? out : 1) * sizeof(float));
      std::copy_n(per_row ? col_scale.data() : col_scale.data() + 1,
                  per_row ? out : 1, w.scale.as<float>());
      ASSERT_TRUE(backend->LayOutWeight(w, 4).ok());
      if (isa != CpuIsa::kAvx512) {
        EXPECT_EQ(w.layout, LinearWeight::Layout::kRows) << CpuIsaName(isa);
        continue;
      }
      ASSERT_EQ(w.layout, LinearWeight::Layout::kE4m3Panels);
      std::vector<uint8_t> packed(E4m3PanelBytes(out, in, 4));
      ASSERT_TRUE(PackE4m3Panels(codes.data(), out, in, 4, packed.data()).ok());
      std::vector<float> want(rows * out), got(rows * out);
      ASSERT_TRUE((per_row ? GemmE4m3PanelChannelScales(
                                 q.data(), row_scale.data(), packed.data(),
                                 col_scale.data(), rows, out, in, want.data(),
                                 DType::kF32, options)
                           : GemmE4m3PanelRowScales(q.data(), row_scale.data(),
                                                    packed.data(), col_scale[1],
                                                    rows, out, in, want.data(),
                                                    DType::kF32, options))
                      .ok());
      ASSERT_TRUE(backend
                      ->GemmE4m3(q.data(), seq_scale.data(),
                                 RowGroups{3, seq.data()}, rows, w, got.data())
                      .ok());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(want[i]),
                  std::bit_cast<uint32_t>(got[i]))
            << "per_row " << per_row << " at " << i;
      }
      // Sequence 2 (rows 4..6) alone, one group.
      std::vector<float> alone(3 * out);
      ASSERT_TRUE(backend
                      ->GemmE4m3(q.data() + 4 * in, &seq_scale[2],
                                 RowGroups{1, nullptr}, 3, w, alone.data())
                      .ok());
      for (int64_t i = 0; i < 3 * out; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[4 * out + i]),
                  std::bit_cast<uint32_t>(alone[i]))
            << "sequence 2 alone, per_row " << per_row << " at " << i;
      }
      ASSERT_TRUE(GemmE4m3PanelBlockSums(q.data(), packed.data(), rows, out, in,
                                         4, want.data(), options)
                      .ok());
      ASSERT_TRUE(
          backend->GemmBlockSums(q.data(), rows, w, 4, got.data()).ok());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(want[i]),
                  std::bit_cast<uint32_t>(got[i]))
            << "block sums at " << i;
      }
    }
  }
}

// Panels packed for blocks of even length serve any count of even blocks
// (the padded blocks are the blocks); odd ones only their own count.
TEST(CpuBackendLayout, MisusedLayoutsAreErrors) {
  if (!CpuIsaSupported(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 here";
  auto backend =
      NewCpuBackend(CpuKernelOptions{.isa = CpuIsa::kAvx512, .num_threads = 1});
  const int64_t out = 16, in = 30;
  std::vector<float> x(in, 1.0f), y(out);
  for (int64_t packed_for : {3, 5}) {  // blocks of 10 (even), 6 (even)
    LinearWeight w =
        Bf16Weight(*backend, testing::RandomBf16(out * in, 4), out, in);
    EXPECT_EQ(backend->LayOutWeight(w, 4).code(),
              absl::StatusCode::kInvalidArgument);  // 30 in 4 blocks
    ASSERT_TRUE(backend->LayOutWeight(w, packed_for).ok());
    EXPECT_EQ(backend->LayOutWeight(w, packed_for).code(),
              absl::StatusCode::kFailedPrecondition);
    for (int64_t blocks : {1, 3, 5, 15}) {  // 30, 10, 6, 2 long
      EXPECT_TRUE(backend->GemmBlockSums(x.data(), 1, w, blocks, y.data()).ok())
          << blocks;
    }
    for (int64_t blocks : {2, 6}) {  // 15, 5 long: odd, packed apart
      EXPECT_EQ(backend->GemmBlockSums(x.data(), 1, w, blocks, y.data()).code(),
                absl::StatusCode::kInvalidArgument)
          << blocks;
    }
  }
  LinearWeight odd =
      Bf16Weight(*backend, testing::RandomBf16(out * in, 5), out, in);
  ASSERT_TRUE(backend->LayOutWeight(odd, 2).ok());  // blocks of 15
  EXPECT_TRUE(backend->GemmBlockSums(x.data(), 1, odd, 2, y.data()).ok());
  EXPECT_EQ(backend->GemmBlockSums(x.data(), 1, odd, 1, y.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octet
