// The CPU's SiLU kernel (kernels/cpu/activation.h) against its scalar
// reference, SiluMulRef: within a few ulp on values across binary32's
// range (signs, zeros, subnormals, the exp's clamp at -87, infinities and
// NaN) and on rows whose length leaves a partial vector; and bit for bit
// against itself at every instruction-set level this CPU has, with one
// thread or several, and for a row alone or in a batch; and bit for bit
// against a scalar twin of its own polynomial.
#include "kernels/cpu/activation.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "tests/status_util.h"

namespace octet {
namespace {

// [rows][2 * cols] gate and up values: random gates over +-20 and +-200,
// the edge values first in every row, up values near 1.
std::vector<float> Inputs(int64_t rows, int64_t cols, uint32_t seed) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {0.0f,
                                    -0.0f,
                                    1e-40f,
                                    -1e-40f,
                                    1e-30f,
                                    -1e-30f,
                                    1.0f,
                                    -1.0f,
                                    86.9f,
                                    -86.9f,
                                    87.5f,
                                    -87.5f,
                                    200.0f,
                                    -200.0f,
                                    kInf,
                                    -kInf,
                                    std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> small(-20.0f, 20.0f),
      wide(-200.0f, 200.0f), up(0.5f, 1.5f);
  std::vector<float> x(rows * 2 * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t e = static_cast<size_t>(c);
      x[r * 2 * cols + c] =
          e < edges.size() ? edges[e] : (c % 3 == 0 ? wide(rng) : small(rng));
      x[r * 2 * cols + cols + c] = up(rng);
    }
  }
  return x;
}

std::vector<float> SiluMulAt(const std::vector<float>& x, int64_t rows,
                             int64_t cols, CpuIsa isa, int threads) {
  std::vector<float> out(rows * cols);
  OCTET_EXPECT_OK(cpu::SiluMul(x.data(), rows, cols, out.data(),
                               {.isa = isa, .num_threads = threads}));
  return out;
}

// Distance in units in the last place between two finite floats.
int64_t Ulps(float a, float b) {
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}

TEST(SiluMul, MatchesTheReferenceWithinAFewUlps) {
  for (CpuIsa isa : SupportedCpuIsas()) {
    for (int64_t cols : {1, 7, 16, 17, 40, 333}) {
      SCOPED_TRACE(::testing::Message()
                   << CpuIsaName(isa) << ", " << cols << " columns");
      const int64_t rows = 3;
      const std::vector<float> x = Inputs(rows, cols, 7 + cols);
      std::vector<float> want(rows * cols);
      cpu::SiluMulRef(x.data(), rows, cols, want.data());
      const std::vector<float> got = SiluMulAt(x, rows, cols, isa, 1);
      for (int64_t i = 0; i < rows * cols; ++i) {
        if (std::isnan(want[i]) || std::isinf(want[i])) {
          // NaN in, or -inf * 0: NaN either way; +inf stays +inf.
          EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << i;
          if (std::isinf(want[i])) {
            EXPECT_EQ(got[i], want[i]) << i;
          }
          continue;
        }
        // The kernel's exp is 0 below -87 (where e^x is subnormal), so
        // SiLU(g) = g * e^g / (1 + e^g) for g < -87 (under 1e-35 in
        // magnitude) comes out as -0.
        if (std::fabs(want[i]) < 1e-30f) {
          EXPECT_NEAR(got[i], want[i], 1e-35f) << i;
          continue;
        }
        EXPECT_LE(Ulps(got[i], want[i]), 4)
            << "at " << i << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

TEST(SiluMul, BitsDoNotDependOnTheLevelTheThreadsOrTheBatch) {
  const int64_t rows = 37, cols = 1000;
  const std::vector<float> x = Inputs(rows, cols, 3);
  std::vector<std::vector<float>> runs;
  for (CpuIsa isa : SupportedCpuIsas()) {
    if (isa == CpuIsa::kScalar) continue;  // the reference: another exp
    runs.push_back(SiluMulAt(x, rows, cols, isa, 1));
    runs.push_back(SiluMulAt(x, rows, cols, isa, 2));
    std::vector<float> alone;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(x.begin() + r * 2 * cols,
                                   x.begin() + (r + 1) * 2 * cols);
      const std::vector<float> y = SiluMulAt(row, 1, cols, isa, 2);
      alone.insert(alone.end(), y.begin(), y.end());
    }
    runs.push_back(alone);
  }
  if (runs.empty()) GTEST_SKIP() << "no vector level on this CPU";
  for (const std::vector<float>& run : runs) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(run[i]),
                std::bit_cast<uint32_t>(runs[0][i]))
          << "at " << i;
    }
  }
}

// The kernel's arithmetic one element at a time (vector_math.h's
// ExpNonPositive and SiluMulRow), each MulAdd a std::fma and every other
// step rounded on its own. This unit is built for the baseline target,
// which has no fused multiply-add to slip in; if the compiler fused steps of
// the kernel the source leaves apart (what -ffp-contract=off prevents, at
// -O2 and above), the bits would differ here.
float ExpNonPositiveTwin(float x) {
  if (std::isnan(x)) return x;
  if (x < -87.0f) return 0.0f;
  const float k = std::fma(x, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  const float r = std::fma(k, 2.12194440e-4f, std::fma(-k, 0.693359375f, x));
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float q = p * r;
  p = std::fma(q, r, r) + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}
float SiluMulTwin(float g, float u) {
  const float t = ExpNonPositiveTwin(g < 0.0f ? g : -g);
  const float num = g < 0.0f ? g * t : g;
  return num / (1.0f + t) * u;
}

TEST(SiluMul, EveryVectorLevelIsItsScalarTwinBitForBit) {
  const int64_t rows = 5, cols = 333;
  const std::vector<float> x = Inputs(rows, cols, 11);
  bool ran = false;
  for (CpuIsa isa : SupportedCpuIsas()) {
    if (isa == CpuIsa::kScalar) continue;  // the reference: another exp
    ran = true;
    SCOPED_TRACE(CpuIsaName(isa));
    const std::vector<float> got = SiluMulAt(x, rows, cols, isa, 1);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float want =
            SiluMulTwin(x[r * 2 * cols + c], x[r * 2 * cols + cols + c]);
        const float have = got[r * cols + c];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(have)) << r << ", " << c;
          continue;
        }
        ASSERT_EQ(std::bit_cast<uint32_t>(have), std::bit_cast<uint32_t>(want))
            << "row " << r << ", column " << c
            << " (g = " << x[r * 2 * cols + c] << "): " << have << " vs "
            << want;
      }
    }
  }
  if (!ran) GTEST_SKIP() << "no vector level on this CPU";
}

}  // namespace
}  // namespace octet
