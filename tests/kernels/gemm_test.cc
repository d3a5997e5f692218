// CPU GEMMs (kernels/cpu/gemm.h) on every instruction-set level, against an
// fp64 reference on exactly decoded inputs, across the odd shapes that break
// blocking (M = 1, 3, 17, ...; K not a multiple of any vector width; N = 1).
//
// Tolerance, derived from K: every product of two e4m3 (or bf16) values is
// exact in binary32, so the only error is the K-term binary32 summation,
// bounded by γ_K · Σ|a_i b_i| with γ_K = K·u / (1 - K·u), u = 2^-24, plus
// one rounding of the scale multiply (and, for bf16 output, bf16 rounding).
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/fp8.h"

namespace octet {
namespace {

struct Shape {
  int64_t m, n, k;
};

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
  return shapes;
}

// Random codes, NaN codes excluded (tested separately).
std::vector<uint8_t> RandomCodes(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<uint8_t> q(count);
  for (auto& c : q) {
    do {
      c = static_cast<uint8_t>(dist(rng));
    } while ((c & 0x7F) == 0x7F);
  }
  return q;
}

std::vector<Bf16> RandomBf16(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<Bf16> v(count);
  for (auto& x : v) x = FloatToBf16(dist(rng));
  return v;
}

float ToFloat(float v) { return v; }
float ToFloat(Bf16 v) { return Bf16ToFloat(v); }

// Checks y against the fp64 reference. value(i) decodes an operand element.
template <typename Y, typename ValueA, typename ValueB>
void ExpectClose(const std::vector<Y>& y, const Shape& s, ValueA a, ValueB b,
                 float out_scale, const std::string& what) {
  const double u = 0x1p-24;
  const double gamma = s.k * u / (1 - s.k * u);
  const double out_rounding = std::is_same_v<Y, Bf16> ? 0x1p-8 : 0x1p-24;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double dot = 0, magnitude = 0;
      for (int64_t t = 0; t < s.k; ++t) {
        const double p = double(a(i * s.k + t)) * double(b(j * s.k + t));
        dot += p;
        magnitude += std::fabs(p);
      }
      const double want = dot * out_scale;
      const double tol =
          gamma * magnitude * std::fabs(out_scale) * (1 + out_rounding) +
          std::fabs(want) * out_rounding * 1.0001 + 1e-30;
      const double got = ToFloat(y[i * s.n + j]);
      ASSERT_LE(std::fabs(got - want), tol)
          << what << " M=" << s.m << " N=" << s.n << " K=" << s.k << " at ("
          << i << "," << j << ") got " << got << " want " << want;
    }
  }
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
    ExpectClose(y, s, a, b, sa * sb, "e4m3->f32");
    std::vector<Bf16> yb(s.m * s.n);
    ASSERT_TRUE(GemmE4m3(qa.data(), sa, qb.data(), sb, s.m, s.n, s.k, yb.data(),
                         DType::kBf16, Options())
                    .ok());
    ExpectClose(yb, s, a, b, sa * sb, "e4m3->bf16");
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
    ExpectClose(y, s, a, b, 1.0f, "bf16->f32");
    std::vector<Bf16> yb(s.m * s.n);
    ASSERT_TRUE(GemmBf16(a16.data(), b16.data(), s.m, s.n, s.k, yb.data(),
                         DType::kBf16, Options())
                    .ok());
    ExpectClose(yb, s, a, b, 1.0f, "bf16->bf16");
  }
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
