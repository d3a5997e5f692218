// The CPU backend's FP8 linear steps with row groups (one activation scale
// per sequence, kernels/backend.h): each group is quantized and multiplied
// exactly as it would be alone, and malformed groups are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/backend.h"
#include "kernels/cpu/gemm.h"
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

}  // namespace
}  // namespace octet
