// AVX2 quantizer kernels (built with -mavx2 -mfma -mf16c). Tails shorter
// than one vector go through the scalar reference kernels, so they match it
// exactly.
#include <immintrin.h>

#include "kernels/cpu/e4m3_simd.h"
#include "kernels/cpu/quantize_kernels.h"

namespace octet::cpu_internal {
namespace {

inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const Bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// Tails shorter than a vector go to the scalar reference kernels, which are
// compiled for the baseline target in their own translation unit: calling
// the header's inline EncodeE4m3 here could leave an AVX2-compiled copy for
// the linker to hand to the scalar path (see e4m3_simd.h).
float TailAbsMax(const float* x, int64_t n) {
  return kQuantizeScalar.absmax_f32(x, n);
}
float TailAbsMax(const Bf16* x, int64_t n) {
  return kQuantizeScalar.absmax_bf16(x, n);
}
void TailQuantize(const float* x, int64_t n, float inv, uint8_t* q) {
  kQuantizeScalar.quantize_f32(x, n, inv, q);
}
void TailQuantize(const Bf16* x, int64_t n, float inv, uint8_t* q) {
  kQuantizeScalar.quantize_bf16(x, n, inv, q);
}

template <typename T>
float AbsMaxAvx2(const T* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  // max_ps(a, m) returns m when a is NaN, so NaN elements are ignored as
  // fmaxf does; the accumulators start at 0 and never become NaN.
  __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_and_ps(Load8(x + i), abs_mask), m0);
    m1 = _mm256_max_ps(_mm256_and_ps(Load8(x + i + 8), abs_mask), m1);
    m2 = _mm256_max_ps(_mm256_and_ps(Load8(x + i + 16), abs_mask), m2);
    m3 = _mm256_max_ps(_mm256_and_ps(Load8(x + i + 24), abs_mask), m3);
  }
  for (; i + 8 <= n; i += 8) {
    m0 = _mm256_max_ps(_mm256_and_ps(Load8(x + i), abs_mask), m0);
  }
  const __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float result = 0.0f;
  for (float v : lanes) result = fmaxf(result, v);
  return fmaxf(result, TailAbsMax(x + i, n - i));
}

template <typename T>
void QuantizeAvx2(const T* x, int64_t n, float inv, uint8_t* q) {
  const __m256 vinv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = EncodeE4m3Avx2(_mm256_mul_ps(Load8(x + i), vinv));
    const __m256i b = EncodeE4m3Avx2(_mm256_mul_ps(Load8(x + i + 8), vinv));
    const __m256i c = EncodeE4m3Avx2(_mm256_mul_ps(Load8(x + i + 16), vinv));
    const __m256i d = EncodeE4m3Avx2(_mm256_mul_ps(Load8(x + i + 24), vinv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i),
                        PackCodesAvx2(a, b, c, d));
  }
  TailQuantize(x + i, n - i, inv, q + i);
}

void DequantizeAvx2(const uint8_t* q, int64_t n, float scale, float* x) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 from_half = _mm256_set1_ps(kE4m3FromHalf);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i codes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    const __m256i h = E4m3HalfFixNanAvx2(E4m3ToHalfAvx2(codes));
    // (half * 256) is decode(q) exactly; then one rounding, as the contract.
    const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    const __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    _mm256_storeu_ps(x + i,
                     _mm256_mul_ps(_mm256_mul_ps(lo, from_half), vscale));
    _mm256_storeu_ps(x + i + 8,
                     _mm256_mul_ps(_mm256_mul_ps(hi, from_half), vscale));
  }
  kQuantizeScalar.dequantize(q + i, n - i, scale, x + i);
}

}  // namespace

const QuantizeKernels kQuantizeAvx2 = {
    AbsMaxAvx2<float>,  AbsMaxAvx2<Bf16>, QuantizeAvx2<float>,
    QuantizeAvx2<Bf16>, DequantizeAvx2,
};

}  // namespace octet::cpu_internal
