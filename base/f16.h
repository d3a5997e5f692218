// IEEE binary16 storage and exact conversions to and from binary32, for
// FP16 checkpoints (converted once at load; no kernel computes in binary16).
#pragma once

#include <bit>
#include <cstdint>

namespace octet {

struct F16 {
  uint16_t bits;
};
static_assert(sizeof(F16) == 2, "F16 must be layout-compatible with __half");

// Exact: every binary16 value, subnormals and NaN included, is a binary32.
constexpr float F16ToFloat(F16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1Fu;
  uint32_t mantissa = h.bits & 0x3FFu;
  if (exponent == 0x1F) {  // inf / NaN
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: value = mantissa * 2^-24, normalised for binary32.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    return std::bit_cast<float>(sign | ((113u - shift) << 23) |
                                ((mantissa & 0x3FFu) << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) |
                              (mantissa << 13));
}

// Round to nearest even; overflow gives ±inf, NaN stays NaN (quieted).
constexpr F16 FloatToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {
    return F16{static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu))};
  }
  if (abs >= 0x477FF000u) {  // >= 65520: rounds to inf
    return F16{static_cast<uint16_t>(sign | 0x7C00u)};
  }
  if (abs < 0x38800000u) {  // below 2^-14: subnormal or zero
    // value / 2^-24, rounded to nearest even, by adding in binary32.
    const float scaled = std::bit_cast<float>(abs) + 0.5f;  // ulp(0.5) = 2^-24
    return F16{static_cast<uint16_t>(
        sign | (std::bit_cast<uint32_t>(scaled) - 0x3F000000u))};
  }
  const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
  return F16{static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13))};
}

}  // namespace octet
