// binary16 conversions (base/f16.h): every half decodes exactly, and
// encoding rounds to nearest even, against CUDA's host-side converters when
// their headers are available and against the definition otherwise.
#include "base/f16.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(OCTET_HAVE_CUDA_HEADERS)
#include <cuda_fp16.h>
#endif

namespace octet {
namespace {

TEST(F16, EveryHalfDecodesExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToFloat(F16{static_cast<uint16_t>(h)});
    const int e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) {
      EXPECT_EQ(std::isnan(f), m != 0) << h;
      continue;
    }
    const double magnitude =
        e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
    EXPECT_EQ(double(f), (h & 0x8000) ? -magnitude : magnitude) << h;
    EXPECT_EQ(FloatToF16(f).bits, h) << "round trip " << h;
  }
}

TEST(F16, EncodeRoundsToNearestEvenAndSaturatesToInfinity) {
  EXPECT_EQ(FloatToF16(1.0f).bits, 0x3C00);
  EXPECT_EQ(FloatToF16(65504.0f).bits, 0x7BFF);
  EXPECT_EQ(FloatToF16(65519.0f).bits, 0x7BFF);
  EXPECT_EQ(FloatToF16(65520.0f).bits, 0x7C00);  // tie to even: inf
  EXPECT_EQ(FloatToF16(-1e9f).bits, 0xFC00);
  EXPECT_EQ(FloatToF16(0x1p-25f).bits, 0x0000);         // tie to even: 0
  EXPECT_EQ(FloatToF16(0x1.8p-24f).bits, 0x0002);       // 1.5 ulp: even
  EXPECT_EQ(FloatToF16(1.0f + 0x1p-11f).bits, 0x3C00);  // tie: even
  EXPECT_EQ(FloatToF16(1.0f + 0x3p-11f).bits, 0x3C02);  // tie: even
  EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(std::nanf("")))));
}

#if defined(OCTET_HAVE_CUDA_HEADERS)
TEST(F16, EncodeMatchesCudaOnSampledFloats) {
  // Every 97th binary32 pattern: all exponents, many mantissas.
  uint64_t mismatches = 0;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 97) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const __half h = __float2half_rn(f);
    const uint16_t cuda = std::bit_cast<uint16_t>(h);
    if (FloatToF16(f).bits != cuda && mismatches++ < 5) {
      ADD_FAILURE() << "x=0x" << std::hex << u << " cuda " << cuda << " ours "
                    << FloatToF16(f).bits;
    }
  }
  EXPECT_EQ(mismatches, 0u);
}
#endif

}  // namespace
}  // namespace octet
