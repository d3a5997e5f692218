// The e4m3 format, the scalar codec and the scale rule (kernels/fp8.h), and
// bfloat16 rounding (base/bf16.h). The exhaustive check of every binary32
// input against CUDA's converter is fp8_exhaustive_test.cc.
#include "kernels/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "base/bf16.h"

#if defined(OCTET_HAVE_CUDA_HEADERS)
#include <cuda_fp8.h>
#endif

namespace octet {
namespace {

// Independent decoder from the format's definition, in double.
double DefinitionValue(int code) {
  const int sign = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double magnitude =
      e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -magnitude : magnitude;
}

TEST(E4m3Decode, EveryCodeMatchesTheDefinition) {
  for (int c = 0; c < 256; ++c) {
    const float v = DecodeE4m3(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << "code " << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), DefinitionValue(c)) << "code " << c;
    EXPECT_EQ(std::signbit(v), c >= 0x80) << "code " << c;
    EXPECT_EQ(std::bit_cast<uint32_t>(kE4m3DecodeTable[c]),
              std::bit_cast<uint32_t>(v));
  }
  EXPECT_EQ(DecodeE4m3(0x7E), 448.0f);
  EXPECT_EQ(DecodeE4m3(0xFE), -448.0f);
  EXPECT_EQ(DecodeE4m3(0x01), 0x1p-9f);
  EXPECT_EQ(DecodeE4m3(0x08), 0x1p-6f);
}

#if defined(OCTET_HAVE_CUDA_HEADERS)
TEST(E4m3Decode, EveryCodeMatchesCudaHostDecoder) {
  for (int c = 0; c < 256; ++c) {
    const __half_raw h =
        __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3);
    const float cuda = __half2float(__half(h));
    const float ours = DecodeE4m3(static_cast<uint8_t>(c));
    if (std::isnan(cuda) || std::isnan(ours)) {
      EXPECT_EQ(std::isnan(cuda), std::isnan(ours)) << "code " << c;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(cuda), std::bit_cast<uint32_t>(ours))
          << "code " << c;
    }
  }
}
#endif

TEST(E4m3Encode, RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(EncodeE4m3(DecodeE4m3(static_cast<uint8_t>(c))), c)
        << "code " << c;
  }
}

TEST(E4m3Encode, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(EncodeE4m3(0.0f), 0x00);
  EXPECT_EQ(EncodeE4m3(-0.0f), 0x80);
  EXPECT_EQ(EncodeE4m3(kNan), 0x7F);
  EXPECT_EQ(EncodeE4m3(-kNan), 0x7F);
  EXPECT_EQ(EncodeE4m3(kInf), 0x7E);
  EXPECT_EQ(EncodeE4m3(-kInf), 0xFE);
  EXPECT_EQ(EncodeE4m3(1e30f), 0x7E);
  EXPECT_EQ(EncodeE4m3(-1e30f), 0xFE);
  EXPECT_EQ(EncodeE4m3(448.0f), 0x7E);
  EXPECT_EQ(EncodeE4m3(464.0f), 0x7E);  // tie between 448 and "480": even wins
  EXPECT_EQ(EncodeE4m3(std::nextafter(464.0f, kInf)), 0x7E);  // saturates
  EXPECT_EQ(EncodeE4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(EncodeE4m3(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_EQ(EncodeE4m3(0x1p-10f),
            0x00);  // half the smallest subnormal: tie to 0
  EXPECT_EQ(EncodeE4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(EncodeE4m3(0x1p-9f), 0x01);
  EXPECT_EQ(EncodeE4m3(3 * 0x1p-10f), 0x02);  // 1.5 ulp: tie to even (2)
  EXPECT_EQ(EncodeE4m3(std::nextafter(0x1p-6f, 0.0f)),
            0x08);  // rounds up into normals
  EXPECT_EQ(EncodeE4m3(1.0f), 0x38);
  EXPECT_EQ(EncodeE4m3(1.0625f), 0x38);  // tie between 1 and 1.125: even
  EXPECT_EQ(EncodeE4m3(1.1875f), 0x3A);  // tie between 1.125 and 1.25: even
  EXPECT_EQ(EncodeE4m3(15.5f), 0x58);  // 15 (0x57) and 16 (0x58) tie: even wins
}

TEST(E4m3Encode, MidpointsBetweenNeighboursRoundToEven) {
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = DefinitionValue(c), hi = DefinitionValue(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in binary32
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(EncodeE4m3(mid), even)
        << "between codes " << c << " and " << c + 1;
    EXPECT_EQ(EncodeE4m3(-mid), even | 0x80);
    EXPECT_EQ(EncodeE4m3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(EncodeE4m3(std::nextafter(mid, 1e9f)), c + 1);
  }
}

TEST(E4m3Scale, FollowsTheContract) {
  const E4m3Scale s = E4m3ScaleFromAbsmax(3.5f);
  EXPECT_EQ(s.scale, 3.5f / 448.0f);
  EXPECT_EQ(s.inv, 1.0f / (3.5f / 448.0f));
  const E4m3Scale zero = E4m3ScaleFromAbsmax(0.0f);
  EXPECT_EQ(zero.scale, kMinAbsmax / 448.0f);
  EXPECT_TRUE(std::isfinite(zero.inv));
  const E4m3Scale inf =
      E4m3ScaleFromAbsmax(std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isinf(inf.scale));
  EXPECT_EQ(inf.inv, 0.0f);
  // The absmax itself encodes to ±448.
  EXPECT_EQ(EncodeE4m3(3.5f * s.inv), 0x7E);
  EXPECT_EQ(EncodeE4m3(-3.5f * s.inv), 0xFE);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F808000u)).bits,
            0x3F80);  // tie, even
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F818000u)).bits,
            0x3F82);  // tie, even
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x3F808001u)).bits, 0x3F81);
  EXPECT_EQ(FloatToBf16(-2.0f).bits, 0xC000);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()).bits, 0x7F80);
  for (uint32_t h = 0; h < 0x10000;
       ++h) {  // every bf16 survives the round trip
    const Bf16 v{static_cast<uint16_t>(h)};
    const float f = Bf16ToFloat(v);
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBf16(f).bits, h);
  }
}

}  // namespace
}  // namespace octet
