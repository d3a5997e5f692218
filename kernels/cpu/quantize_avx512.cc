// AVX-512 quantizer kernels (built with the AVX-512 F/BW/VL/DQ/BF16 flags).
// Tails use masked loads and stores, so every element takes the same path.
#include <immintrin.h>

#include "kernels/cpu/e4m3_simd.h"
#include "kernels/cpu/quantize_kernels.h"

namespace octet::cpu_internal {
namespace {

inline __mmask16 TailMask(int64_t left) {
  return static_cast<__mmask16>((1u << left) - 1u);
}

inline __m512 Load16(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
inline __m512 Load16(const Bf16* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <typename T>
float AbsMaxAvx512(const T* x, int64_t n) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  // max_ps(a, m) returns m when a is NaN: NaN elements are ignored, as fmaxf
  // does. Masked-off lanes load 0, which leaves the maximum unchanged.
  __m512 m0 = _mm512_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(_mm512_and_ps(Load16(x + i, 0xFFFF), abs_mask), m0);
    m1 = _mm512_max_ps(_mm512_and_ps(Load16(x + i + 16, 0xFFFF), abs_mask), m1);
    m2 = _mm512_max_ps(_mm512_and_ps(Load16(x + i + 32, 0xFFFF), abs_mask), m2);
    m3 = _mm512_max_ps(_mm512_and_ps(Load16(x + i + 48, 0xFFFF), abs_mask), m3);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xFFFF : TailMask(n - i);
    m0 = _mm512_max_ps(_mm512_and_ps(Load16(x + i, m), abs_mask), m0);
  }
  return _mm512_reduce_max_ps(
      _mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

template <typename T>
void QuantizeAvx512(const T* x, int64_t n, float inv, uint8_t* q) {
  const __m512 vinv = _mm512_set1_ps(inv);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i codes =
        EncodeE4m3Avx512(_mm512_mul_ps(Load16(x + i, 0xFFFF), vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), codes);
  }
  if (i < n) {
    const __mmask16 m = TailMask(n - i);
    _mm_mask_storeu_epi8(
        q + i, m, EncodeE4m3Avx512(_mm512_mul_ps(Load16(x + i, m), vinv)));
  }
}

void DequantizeAvx512(const uint8_t* q, int64_t n, float scale, float* x) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 from_half = _mm512_set1_ps(kE4m3FromHalf);
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t left = n - i;
    const __mmask32 m =
        left >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1ull << left) - 1u);
    const __m512i h = E4m3HalfFixNanAvx512(
        E4m3ToHalfAvx512(_mm256_maskz_loadu_epi8(m, q + i)));
    // (half * 256) is decode(q) exactly; then one rounding, as the contract.
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    _mm512_mask_storeu_ps(x + i, static_cast<__mmask16>(m),
                          _mm512_mul_ps(_mm512_mul_ps(lo, from_half), vscale));
    _mm512_mask_storeu_ps(x + i + 16, static_cast<__mmask16>(m >> 16),
                          _mm512_mul_ps(_mm512_mul_ps(hi, from_half), vscale));
  }
}

}  // namespace

const QuantizeKernels kQuantizeAvx512 = {
    AbsMaxAvx512<float>,  AbsMaxAvx512<Bf16>, QuantizeAvx512<float>,
    QuantizeAvx512<Bf16>, DequantizeAvx512,
};

}  // namespace octet::cpu_internal
