// Internal: float8 e4m3 <-> binary32 in SIMD registers, shared by the
// quantizer and GEMM translation units of one instruction-set level. Include
// only from a file compiled with that level's flags (the #if guards below).
//
// Decoding goes through binary16: an e4m3 code shifted into a half's bit
// layout (sign to bit 15, exponent+mantissa to bits 13..7) is a half whose
// value is exactly decode(code) * 2^-8, subnormals included, because both
// formats have the same mantissa alignment and the exponent biases differ by
// 8. F16C's vcvtph2ps then widens it exactly. Only the NaN codes (S.1111.111)
// need fixing up, since half has a wider exponent.
//
// Encoding is branch-free: the normal range rounds to nearest even with the
// add-0x7FFFF-plus-lsb trick on the binary32 bits; the subnormal range
// (|x| < 2^-6) rounds by adding 2^14 in binary32, whose ulp is e4m3's 2^-9;
// then saturation and NaN are blended in. Bit-identical to EncodeE4m3.
//
// With AVX-512 VBMI, e4m3 -> bfloat16 (E4m3Decoder) is two 128-entry
// byte-table lookups instead, for the GEMMs' vdpbf16ps.
//
// Everything here has internal linkage (anonymous namespace): each
// instruction-set translation unit gets its own copy, compiled with its own
// flags, and the linker can never hand an AVX-512 copy to the AVX2 path.
#pragma once

#include <immintrin.h>

#include <bit>
#include <cstdint>

#include "kernels/fp8.h"

namespace octet::cpu_internal {
namespace {  // NOLINT(build/namespaces): see above

// decode(code) = half_value * kE4m3FromHalf.
inline constexpr float kE4m3FromHalf = 256.0f;

#if defined(__AVX2__) && defined(__F16C__)

// Sixteen codes -> sixteen halves, each decode(code) * 2^-8. NaN codes come
// out as finite halves (480 * 2^-8); see E4m3HalfFixNanAvx2.
inline __m256i E4m3ToHalfAvx2(__m128i codes) {
  const __m256i w = _mm256_cvtepi8_epi16(codes);  // sign fills bits 15..8
  return _mm256_and_si256(_mm256_slli_epi16(w, 7),
                          _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
}

// Turns the halves of NaN codes into half NaNs.
inline __m256i E4m3HalfFixNanAvx2(__m256i h) {
  const __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
  const __m256i is_nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x3F80));
  return _mm256_blendv_epi8(h, _mm256_set1_epi16(0x7E00), is_nan);
}

// Eight binary32 values (already multiplied by inv) -> eight codes in the low
// byte of each 32-bit lane.
inline __m256i EncodeE4m3Avx2(__m256 y) {
  const __m256i bits = _mm256_castps_si256(y);
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign =
      _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
  const __m256i lsb =
      _mm256_and_si256(_mm256_srli_epi32(abs, 20), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_add_epi32(abs, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), lsb));
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(rounded, 20),
                                          _mm256_set1_epi32(120 << 3));
  const __m256 shifted =
      _mm256_add_ps(_mm256_castsi256_ps(abs), _mm256_set1_ps(16384.0f));
  const __m256i subnormal = _mm256_sub_epi32(_mm256_castps_si256(shifted),
                                             _mm256_set1_epi32(0x46800000));
  const __m256i is_subnormal =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), abs);
  __m256i code = _mm256_blendv_epi8(normal, subnormal, is_subnormal);
  const __m256i is_big = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x43E80000));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7E), is_big);
  code = _mm256_or_si256(code, sign);
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), is_nan);
}

// Four vectors of eight codes (low byte of each lane) -> 32 bytes in order.
inline __m256i PackCodesAvx2(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packus_epi32(a, b);
  const __m256i cd = _mm256_packus_epi32(c, d);
  const __m256i bytes = _mm256_packus_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(bytes,
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

#endif  // __AVX2__ && __F16C__

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)

// Thirty-two codes -> thirty-two halves, each decode(code) * 2^-8 (NaN codes
// not fixed up; see E4m3HalfFixNanAvx512).
inline __m512i E4m3ToHalfAvx512(__m256i codes) {
  const __m512i w = _mm512_cvtepi8_epi16(codes);
  return _mm512_and_si512(_mm512_slli_epi16(w, 7),
                          _mm512_set1_epi16(static_cast<int16_t>(0xBF80)));
}

inline __m512i E4m3HalfFixNanAvx512(__m512i h) {
  const __mmask32 is_nan =
      _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, _mm512_set1_epi16(0x7FFF)),
                              _mm512_set1_epi16(0x3F80));
  return _mm512_mask_blend_epi16(is_nan, h, _mm512_set1_epi16(0x7E00));
}

// Sixteen binary32 values (already multiplied by inv) -> sixteen codes.
inline __m128i EncodeE4m3Avx512(__m512 y) {
  const __m512i bits = _mm512_castps_si512(y);
  const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i sign =
      _mm512_and_si512(_mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80));
  const __m512i lsb =
      _mm512_and_si512(_mm512_srli_epi32(abs, 20), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_add_epi32(abs, _mm512_add_epi32(_mm512_set1_epi32(0x7FFFF), lsb));
  const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(rounded, 20),
                                          _mm512_set1_epi32(120 << 3));
  const __m512 shifted =
      _mm512_add_ps(_mm512_castsi512_ps(abs), _mm512_set1_ps(16384.0f));
  const __m512i subnormal = _mm512_sub_epi32(_mm512_castps_si512(shifted),
                                             _mm512_set1_epi32(0x46800000));
  const __mmask16 is_subnormal =
      _mm512_cmplt_epi32_mask(abs, _mm512_set1_epi32(0x3C800000));
  __m512i code = _mm512_mask_blend_epi32(is_subnormal, normal, subnormal);
  const __mmask16 is_big =
      _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x43E80000));
  code = _mm512_mask_blend_epi32(is_big, code, _mm512_set1_epi32(0x7E));
  code = _mm512_or_si512(code, sign);
  const __mmask16 is_nan =
      _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F800000));
  code = _mm512_mask_blend_epi32(is_nan, code, _mm512_set1_epi32(0x7F));
  return _mm512_cvtepi32_epi8(code);
}

#endif  // AVX-512

#if defined(__AVX512BW__) && defined(__AVX512VBMI__)

// The bfloat16 of each e4m3 magnitude (sign bit clear), split into the high
// and low byte tables the decoder looks up; exact, as e4m3 has 3 mantissa
// bits. Magnitude 0x7F (NaN) maps to a bfloat16 NaN.
template <int kShift>
struct alignas(64) ByteTable {
  uint8_t bytes[128];
  constexpr ByteTable() : bytes() {
    for (int c = 0; c < 128; ++c) {
      bytes[c] = static_cast<uint8_t>(
          std::bit_cast<uint32_t>(kE4m3DecodeTable[c]) >> (16 + kShift));
    }
  }
};
constexpr ByteTable<8> kHighBytes;
constexpr ByteTable<0> kLowBytes;

struct E4m3Decoder {
  __m512i hi0, hi1, lo0, lo1, sign;

  E4m3Decoder()
      : hi0(_mm512_load_si512(kHighBytes.bytes)),
        hi1(_mm512_load_si512(kHighBytes.bytes + 64)),
        lo0(_mm512_load_si512(kLowBytes.bytes)),
        lo1(_mm512_load_si512(kLowBytes.bytes + 64)),
        sign(_mm512_set1_epi8(static_cast<char>(0x80))) {}

  // 64 codes -> 64 bfloat16 in two vectors, in the decoder's K order: the
  // byte interleave works within 128-bit lanes, so lane L of w0 holds codes
  // 16 L .. 16 L + 7 and lane L of w1 codes 16 L + 8 .. 16 L + 15.
  void Decode(__m512i codes, __m512i& w0, __m512i& w1) const {
    // vpermi2b reads index bits 0..6 only, so the sign bit is ignored here
    // and OR-ed back in by the ternary-logic op (0xF8: hi | (codes & 0x80)).
    __m512i hi = _mm512_permutex2var_epi8(hi0, codes, hi1);
    const __m512i lo = _mm512_permutex2var_epi8(lo0, codes, lo1);
    hi = _mm512_ternarylogic_epi32(hi, codes, sign, 0xF8);
    w0 = _mm512_unpacklo_epi8(lo, hi);
    w1 = _mm512_unpackhi_epi8(lo, hi);
  }
};

#endif  // AVX-512 BW + VBMI

}  // namespace
}  // namespace octet::cpu_internal
