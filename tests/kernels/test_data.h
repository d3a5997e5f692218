// Inputs and the fp64 GEMM check shared by the kernel tests (CPU and GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/bf16.h"

namespace octet::testing {

// Random e4m3 codes, NaN codes (S.1111.111) excluded.
inline std::vector<uint8_t> RandomCodes(int64_t count, uint32_t seed) {
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

inline std::vector<Bf16> RandomBf16(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<Bf16> v(count);
  for (auto& x : v) x = FloatToBf16(dist(rng));
  return v;
}

// Normal values (standard deviation `scale`) rounded to bfloat16, so that
// backends computing in bfloat16 and in binary32 start from the same numbers.
inline std::vector<float> NormalBf16Values(int64_t n, uint32_t seed,
                                           float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = Bf16ToFloat(FloatToBf16(d(rng)));
  return v;
}

// Normal values spread over 2^-30 .. 2^12, with the awkward ones mixed in
// every 13th element: signed zeros, NaN, a binary32 subnormal, the e4m3
// maximum and the values around saturation, a rounding tie.
inline std::vector<float> MixedFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-30, 12);
  const float specials[] = {
      0.0f,    -0.0f,   std::numeric_limits<float>::quiet_NaN(),
      1e-40f,  -1e-40f, 448.0f,
      464.0f,  -465.0f, 0x1p-10f,
      0x1p-6f, 1.0625f};
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = (i % 13 == 5) ? specials[(i / 13) % std::size(specials)]
                         : std::ldexp(normal(rng), exp(rng));
  }
  return x;
}

struct GemmShape {
  int64_t m, n, k;
};

// Checks y (row-major M x N, already widened to float) against fp64 dot
// products of a(row * K + i) and b(col * K + i), times out_scale.
//
// Bound: each product of two e4m3 or bf16 values is exact in binary32, so the
// only error is the K-term binary32 summation, at most γ_K·Σ|a_i b_i| with
// γ_K = K·u / (1 - K·u), u = 2^-24; plus `extra_rel`·Σ|a_i b_i| for kernels
// known to accumulate less precisely; plus one rounding of the output
// (2^-24 for f32, 2^-8 for bf16). If `max_rel` is given it receives the
// largest |error| / (|out_scale| · Σ|a_i b_i|) seen, for reporting.
template <typename A, typename B>
void ExpectGemmClose(const std::vector<float>& y, const GemmShape& s, A a, B b,
                     double out_scale, bool y_bf16, double extra_rel,
                     const std::string& what, double* max_rel = nullptr) {
  ASSERT_EQ(y.size(), static_cast<size_t>(s.m * s.n)) << what;
  if (max_rel != nullptr) *max_rel = 0;
  const double u = 0x1p-24, gamma = s.k * u / (1 - s.k * u);
  const double out_rounding = y_bf16 ? 0x1p-8 : 0x1p-24;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double dot = 0, magnitude = 0;
      for (int64_t t = 0; t < s.k; ++t) {
        const double p = double(a(i * s.k + t)) * double(b(j * s.k + t));
        dot += p;
        magnitude += std::fabs(p);
      }
      const double want = dot * out_scale;
      const double tol = (gamma + extra_rel) * magnitude *
                             std::fabs(out_scale) * (1 + out_rounding) +
                         std::fabs(want) * out_rounding * 1.0001 + 1e-30;
      const double err = std::fabs(y[i * s.n + j] - want);
      if (max_rel != nullptr && magnitude > 0) {
        *max_rel = std::max(*max_rel, err / (magnitude * std::fabs(out_scale)));
      }
      ASSERT_LE(err, tol) << what << " M=" << s.m << " N=" << s.n
                          << " K=" << s.k << " at (" << i << "," << j
                          << ") got " << y[i * s.n + j] << " want " << want;
    }
  }
}

inline std::vector<float> Widen(const std::vector<Bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToFloat(v[i]);
  return out;
}

}  // namespace octet::testing
