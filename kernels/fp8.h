// OCP float8 e4m3fn: the format, its scalar reference codec and the
// per-tensor scale rule. This file is the executable form of the FP8 contract
// in docs/design.md; every backend (CPU fast paths, CUDA) is tested against it.
//
// Format: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no
// infinities; max finite ±448 (S.1111.110); NaN = S.1111.111. Subnormals are
// m * 2^-9.
//
// Encode (EncodeE4m3): round to nearest even, saturating: ±inf and |x| > 448
// become ±448; NaN becomes 0x7F; -0 becomes 0x80. Bit-identical to CUDA's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) for every binary32
// input (tests/kernels/fp8_exhaustive_test.cc checks all 2^32).
//
// Per-tensor quantization, all in binary32, in this order:
//   absmax = fmaxf-fold of |x| starting at 0   (a NaN element is ignored)
//   scale  = max(absmax, kMinAbsmax) / 448
//   inv    = 1 / scale
//   q      = EncodeE4m3(x * inv)
//   x'     = DecodeE4m3(q) * scale              (dequantize)
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define OCTET_HOST_DEVICE __host__ __device__
#else
#define OCTET_HOST_DEVICE
#endif

namespace octet {

inline constexpr float kE4m3Max = 448.0f;
// Floor of the absmax that defines a scale, so that an all-zero tensor gets a
// finite, non-zero scale (and inv stays finite).
inline constexpr float kMinAbsmax = 1e-12f;
inline constexpr uint8_t kE4m3NanCode = 0x7F;
inline constexpr uint8_t kE4m3MaxCode = 0x7E;

// A per-tensor scale and its reciprocal, computed by the contract's rule.
struct E4m3Scale {
  float scale;  // dequantize: x ≈ decode(q) * scale
  float inv;    // quantize:   q = encode(x * inv)
};

// scale = max(absmax, kMinAbsmax) / 448, inv = 1 / scale. `absmax` must not
// be NaN (AbsMax folds with fmaxf, which never yields NaN from a 0 start).
OCTET_HOST_DEVICE inline E4m3Scale E4m3ScaleFromAbsmax(float absmax) {
  const float scale = fmaxf(absmax, kMinAbsmax) / kE4m3Max;
  return E4m3Scale{scale, 1.0f / scale};
}

// Scalar reference encoder. Branchy on purpose: it mirrors the contract case
// by case. Fast paths live in kernels/cpu/quantize_*.cc.
constexpr uint8_t EncodeE4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return kE4m3NanCode;         // NaN, either sign
  if (abs > 0x43E80000u) return sign | kE4m3MaxCode;  // > 464 (448 + half ulp)
  if (abs <= 0x3A800000u) return sign;                // <= 2^-10: rounds to 0
  uint32_t code;
  if (abs < 0x3C800000u) {
    // Below 2^-6: subnormal codes, value = code * 2^-9.
    const uint32_t exponent = abs >> 23;  // 117..120
    const uint32_t significand = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 141u - exponent;  // 21..24
    code = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (code & 1u))) ++code;
  } else {
    // Normal: exponent field e-120 (binary32 bias 127 -> e4m3 bias 7),
    // top 3 mantissa bits, then round to nearest even on the 20 dropped bits.
    // A carry out of the mantissa correctly bumps the exponent.
    code = (((abs >> 23) - 120u) << 3) | ((abs >> 20) & 7u);
    const uint32_t rest = abs & 0xFFFFFu;
    if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;
  }
  return static_cast<uint8_t>(sign | code);
}

// Scalar reference decoder: exact. Both NaN codes decode to a quiet NaN.
constexpr float DecodeE4m3(uint8_t q) {
  const uint32_t sign = static_cast<uint32_t>(q & 0x80u) << 24;
  const uint32_t exponent = (q >> 3) & 0xFu;
  const uint32_t mantissa = q & 7u;
  if (exponent == 15 && mantissa == 7) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-9f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 120u) << 23) |
                              (mantissa << 20));
}

// DecodeE4m3 for every code, for table-driven conversions (packing, small
// activation vectors). Entry c equals DecodeE4m3(c).
inline constexpr std::array<float, 256> kE4m3DecodeTable = [] {
  std::array<float, 256> table{};
  for (int c = 0; c < 256; ++c) table[c] = DecodeE4m3(static_cast<uint8_t>(c));
  return table;
}();

}  // namespace octet
