// CPU per-tensor quantization (kernels/cpu/quantize.h) on every
// instruction-set level this CPU has, against the scalar contract in
// kernels/fp8.h: the absmax fold, the codes, the scale, and the edge cases
// the contract names (zero tensors, infinities, NaN, ragged lengths).
#include "kernels/cpu/quantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/fp8.h"
#include "tests/kernels/test_data.h"

namespace octet {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Lengths around every vector width (8, 16, 32, 64) and the chunk split.
const std::vector<int64_t> kLengths = {0,  1,   2,   7,   8,   9,    15,
                                       16, 17,  31,  32,  33,  63,   64,
                                       65, 100, 127, 128, 129, 1000, 4097};

float RefAbsMax(const std::vector<float>& x) {
  float m = 0.0f;
  for (float v : x) m = fmaxf(m, std::fabs(v));
  return m;
}

// Normal values at several magnitudes, with the awkward ones mixed in.
using testing::MixedFloats;

std::vector<Bf16> ToBf16(const std::vector<float>& x) {
  std::vector<Bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = FloatToBf16(x[i]);
  return out;
}

std::vector<float> FromBf16(const std::vector<Bf16>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Bf16ToFloat(x[i]);
  return out;
}

class QuantizeTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  CpuKernelOptions Options(int threads = 1) const {
    return CpuKernelOptions{.isa = GetParam(), .num_threads = threads};
  }
};

TEST_P(QuantizeTest, AbsMaxMatchesTheFold) {
  for (int64_t n : kLengths) {
    const std::vector<float> x = MixedFloats(n, static_cast<uint32_t>(n));
    absl::StatusOr<float> got = AbsMax(x.data(), n, Options());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, RefAbsMax(x)) << "n=" << n;
    const std::vector<Bf16> xb = ToBf16(x);
    absl::StatusOr<float> got_bf16 = AbsMax(xb.data(), n, Options());
    ASSERT_TRUE(got_bf16.ok());
    EXPECT_EQ(*got_bf16, RefAbsMax(FromBf16(xb))) << "n=" << n;
  }
}

TEST_P(QuantizeTest, AbsMaxIgnoresNanAndSeesInfinity) {
  for (int64_t n : {1, 5, 16, 33, 100}) {
    for (int64_t pos = 0; pos < n; pos += std::max<int64_t>(1, n / 7)) {
      std::vector<float> x(n, 0.5f);
      x[pos] = kNan;
      EXPECT_EQ(*AbsMax(x.data(), n, Options()), n == 1 ? 0.0f : 0.5f);
      x[pos] = -kInf;
      EXPECT_EQ(*AbsMax(x.data(), n, Options()), kInf);
    }
  }
  const std::vector<float> all_nan(40, kNan);
  EXPECT_EQ(*AbsMax(all_nan.data(), 40, Options()), 0.0f);
}

TEST_P(QuantizeTest, CodesMatchTheScalarContract) {
  for (int64_t n : kLengths) {
    const std::vector<float> x = MixedFloats(n, 100 + static_cast<uint32_t>(n));
    for (float inv : {1.0f, 0.37f, 448.0f / 3.0f, 1e6f, 0.0f}) {
      std::vector<uint8_t> q(n, 0xAA);
      ASSERT_TRUE(QuantizeE4m3(x.data(), n, inv, q.data(), Options()).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(q[i], EncodeE4m3(x[i] * inv))
            << "n=" << n << " i=" << i << " x=" << x[i] << " inv=" << inv;
      }
      const std::vector<Bf16> xb = ToBf16(x);
      ASSERT_TRUE(QuantizeE4m3(xb.data(), n, inv, q.data(), Options()).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(q[i], EncodeE4m3(Bf16ToFloat(xb[i]) * inv))
            << "bf16 n=" << n << " i=" << i;
      }
    }
  }
}

TEST_P(QuantizeTest, DynamicQuantizationUsesTheAbsmaxScale) {
  for (int64_t n : kLengths) {
    if (n == 0) continue;
    std::vector<float> x = MixedFloats(n, 7 + static_cast<uint32_t>(n));
    std::vector<uint8_t> q(n);
    absl::StatusOr<E4m3Scale> s =
        QuantizeE4m3Dynamic(x.data(), n, q.data(), Options());
    ASSERT_TRUE(s.ok());
    const E4m3Scale want = E4m3ScaleFromAbsmax(RefAbsMax(x));
    EXPECT_EQ(s->scale, want.scale);
    EXPECT_EQ(s->inv, want.inv);
    bool saw_max = false;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(q[i], EncodeE4m3(x[i] * want.inv)) << "n=" << n << " i=" << i;
      saw_max |= (q[i] & 0x7F) == 0x7E;
    }
    EXPECT_TRUE(saw_max) << "the absmax element must map to ±448, n=" << n;
  }
}

TEST_P(QuantizeTest, ZeroTensorGetsTheFloorScale) {
  for (int64_t n : {1, 17, 64, 333}) {
    std::vector<float> x(n, 0.0f);
    for (int64_t i = 1; i < n; i += 2) x[i] = -0.0f;
    std::vector<uint8_t> q(n, 0xAA);
    absl::StatusOr<E4m3Scale> s =
        QuantizeE4m3Dynamic(x.data(), n, q.data(), Options());
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->scale, kMinAbsmax / 448.0f);
    EXPECT_TRUE(std::isfinite(s->inv));
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(q[i], i % 2 ? 0x80 : 0x00) << i;
  }
}

TEST_P(QuantizeTest, InfinityMakesAnInfiniteScale) {
  // absmax = inf -> scale = inf, inv = 0: finite elements become ±0 and the
  // infinities become NaN (inf * 0), exactly as the contract computes.
  for (int64_t n : {3, 16, 40}) {
    std::vector<float> x(n, 1.5f);
    x[0] = kInf;
    x[n - 1] = -2.0f;
    std::vector<uint8_t> q(n);
    absl::StatusOr<E4m3Scale> s =
        QuantizeE4m3Dynamic(x.data(), n, q.data(), Options());
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(std::isinf(s->scale));
    EXPECT_EQ(s->inv, 0.0f);
    EXPECT_EQ(q[0], 0x7F);
    for (int64_t i = 1; i < n - 1; ++i) EXPECT_EQ(q[i], 0x00);
    EXPECT_EQ(q[n - 1], 0x80);
  }
}

TEST_P(QuantizeTest, DequantizeMatchesTheContract) {
  std::vector<uint8_t> q;
  for (int rep = 0; rep < 3; ++rep)
    for (int c = 0; c < 256; ++c) q.push_back(static_cast<uint8_t>(c));
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{31},
                    int64_t{33}, static_cast<int64_t>(q.size())}) {
    for (float scale : {1.0f, 0.0123f, 3.5f / 448.0f}) {
      std::vector<float> x(n, -1.0f);
      ASSERT_TRUE(DequantizeE4m3(q.data(), n, scale, x.data(), Options()).ok());
      for (int64_t i = 0; i < n; ++i) {
        const float want = DecodeE4m3(q[i]) * scale;
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(x[i])) << "code " << int(q[i]);
        } else {
          EXPECT_EQ(std::bit_cast<uint32_t>(x[i]),
                    std::bit_cast<uint32_t>(want))
              << "code " << int(q[i]) << " scale " << scale;
        }
      }
    }
  }
}

TEST_P(QuantizeTest, ThreadsDoNotChangeResults) {
  const int64_t n = (int64_t{1} << 20) + 13;  // above the parallel threshold
  const std::vector<float> x = MixedFloats(n, 42);
  std::vector<uint8_t> one(n), many(n);
  absl::StatusOr<E4m3Scale> s1 =
      QuantizeE4m3Dynamic(x.data(), n, one.data(), Options(1));
  absl::StatusOr<E4m3Scale> s3 =
      QuantizeE4m3Dynamic(x.data(), n, many.data(), Options(3));
  ASSERT_TRUE(s1.ok() && s3.ok());
  EXPECT_EQ(s1->scale, s3->scale);
  EXPECT_EQ(one, many);
}

TEST_P(QuantizeTest, BadArgumentsAreErrors) {
  float x = 1.0f;
  uint8_t q = 0;
  EXPECT_EQ(QuantizeE4m3(&x, -1, 1.0f, &q, Options()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      QuantizeE4m3(static_cast<const float*>(nullptr), 4, 1.0f, &q, Options())
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeE4m3(&x, 1, kNan, &q, Options()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeE4m3(&x, 1, -2.0f, &q, Options()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      AbsMax(&x, 1, CpuKernelOptions{.isa = GetParam(), .num_threads = -1})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(QuantizeE4m3(&x, 0, 1.0f, nullptr, Options()).ok());
}

std::string IsaName(const ::testing::TestParamInfo<CpuIsa>& info) {
  return std::string(CpuIsaName(info.param));
}

INSTANTIATE_TEST_SUITE_P(EveryCpuIsa, QuantizeTest,
                         ::testing::ValuesIn(SupportedCpuIsas()), IsaName);

TEST(CpuIsa, UnsupportedLevelIsAnErrorNotACrash) {
  if (CpuIsaSupported(CpuIsa::kAvx512)) {
    GTEST_SKIP() << "this CPU has every level; nothing unsupported to ask for";
  }
  float x = 1.0f;
  uint8_t q;
  EXPECT_EQ(
      QuantizeE4m3(&x, 1, 1.0f, &q, CpuKernelOptions{.isa = CpuIsa::kAvx512})
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST(CpuIsa, ParsesNames) {
  EXPECT_EQ(*ParseCpuIsa("avx2"), CpuIsa::kAvx2);
  EXPECT_EQ(*ParseCpuIsa("auto"), CpuIsa::kAuto);
  EXPECT_EQ(ParseCpuIsa("sse9").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ResolveCpuIsa(CpuIsa::kAuto), CpuIsa::kAuto);
}

}  // namespace
}  // namespace octet
