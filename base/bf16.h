// bfloat16 storage and its conversions to and from binary32.
//
// FloatToBf16 rounds to nearest even, as CUDA's __float2bfloat16 does; NaN
// stays NaN (quieted). Bf16ToFloat is exact.
#pragma once

#include <bit>
#include <cstdint>

namespace octet {

struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2 && alignof(Bf16) == 2,
              "Bf16 must be layout-compatible with __nv_bfloat16");

constexpr float Bf16ToFloat(Bf16 h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16);
}

constexpr Bf16 FloatToBf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep sign, force quiet bit.
    return Bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return Bf16{static_cast<uint16_t>(u >> 16)};
}

}  // namespace octet
