// AVX2 GEMM kernels (AVX2 + FMA + F16C), binary32 FMA throughout.
//
// e4m3 weights are widened through binary16 (e4m3_simd.h): exact values
// times 2^-8, so e4m3_dot_scale is 256. Activations are prepared as exact
// binary32 in natural K order, padded to 16 with zeros. Tiles of four weight
// rows and up to two activation rows keep 8 accumulators, 2 weight and 4
// activation vectors within the 16 ymm registers. Past the last 16, eight
// more weights (if there are) take one 8-wide step into the same
// accumulators, and the last K % 8 go through scalar code with the same
// scaling after the horizontal sum. The 8-wide step matters for narrow K
// blocks (a row-parallel layer's, *BlockSums: SmolLM2's are 24 codes wide),
// where a scalar tail of 8 was a third of the products; the weights are
// never read past k (an e4m3 NaN code times a zero activation is NaN).
#include <immintrin.h>

#include "kernels/cpu/e4m3_simd.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/rows_tiling.h"
#include "kernels/fp8.h"

namespace octet::cpu_internal {
namespace {

constexpr int kAlign = 16;
constexpr int kRowsPerTile = 4;
constexpr int kMaxMPerTile = 2;
constexpr float kHalfScale = 0x1p-8f;  // what the binary16 route carries

inline float HorizontalSum(__m256 v) {
  const __m128 s =
      _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float Bf16Value(Bf16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Eight bfloat16 -> eight binary32 (exact).
inline __m256 WidenBf16(const Bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Sixteen codes -> sixteen binary32 values times 2^-8 (NaN codes -> NaN).
inline void DecodeE4m3x16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m256i h = E4m3HalfFixNanAvx2(
      E4m3ToHalfAvx2(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// Eight codes -> eight binary32 values times 2^-8 (reads 8 bytes only).
inline __m256 DecodeE4m3x8(const uint8_t* p) {
  const __m256i h = E4m3HalfFixNanAvx2(
      E4m3ToHalfAvx2(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  return _mm256_cvtph_ps(_mm256_castsi256_si128(h));
}

// The rows tile over raw weights of element type W. Weight<W>::Load gives
// sixteen binary32 weights, Load8 eight, Weight<W>::Scalar one (the tail).
template <typename W>
struct Weight;
template <>
struct Weight<uint8_t> {
  static void Load(const uint8_t* p, __m256& lo, __m256& hi) {
    DecodeE4m3x16(p, lo, hi);
  }
  static __m256 Load8(const uint8_t* p) { return DecodeE4m3x8(p); }
  static float Scalar(uint8_t q) { return kE4m3DecodeTable[q] * kHalfScale; }
};
template <>
struct Weight<Bf16> {
  static void Load(const Bf16* p, __m256& lo, __m256& hi) {
    lo = WidenBf16(p);
    hi = WidenBf16(p + 8);
  }
  static __m256 Load8(const Bf16* p) { return WidenBf16(p); }
  static float Scalar(Bf16 v) { return Bf16Value(v); }
};
template <>
struct Weight<float> {
  static void Load(const float* p, __m256& lo, __m256& hi) {
    lo = _mm256_loadu_ps(p);
    hi = _mm256_loadu_ps(p + 8);
  }
  static __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
  static float Scalar(float v) { return v; }
};

template <typename W>
struct TileOf {
  template <int NB, int MB>
  struct Tile {
    static void Run(const void* a_ptr, int64_t lda, const W* b, int64_t ldb,
                    int64_t k, int64_t col, int64_t row0, float* c,
                    int64_t ldc) {
      const float* a = static_cast<const float*>(a_ptr) + row0 * lda;
      __m256 acc[NB][MB];
      OCTET_UNROLL for (int r = 0; r < NB; ++r) {
        OCTET_UNROLL for (int m = 0; m < MB; ++m) acc[r][m] =
            _mm256_setzero_ps();
      }
      int64_t i = 0;
      for (; i + 16 <= k; i += 16) {
        __m256 x_lo[MB], x_hi[MB];
        OCTET_UNROLL for (int m = 0; m < MB; ++m) {
          x_lo[m] = _mm256_loadu_ps(a + m * lda + i);
          x_hi[m] = _mm256_loadu_ps(a + m * lda + i + 8);
        }
        OCTET_UNROLL for (int r = 0; r < NB; ++r) {
          // Next tile's rows, one tile ahead (see gemm_avx512.cc).
          _mm_prefetch(
              reinterpret_cast<const char*>(b + (col + NB + r) * ldb + i),
              _MM_HINT_T1);
          __m256 w_lo, w_hi;
          Weight<W>::Load(b + (col + r) * ldb + i, w_lo, w_hi);
          OCTET_UNROLL for (int m = 0; m < MB; ++m) {
            acc[r][m] = _mm256_fmadd_ps(w_lo, x_lo[m], acc[r][m]);
            acc[r][m] = _mm256_fmadd_ps(w_hi, x_hi[m], acc[r][m]);
          }
        }
      }
      if (i + 8 <= k) {
        __m256 x[MB];
        OCTET_UNROLL for (int m = 0; m < MB; ++m) {
          x[m] = _mm256_loadu_ps(a + m * lda + i);
        }
        OCTET_UNROLL for (int r = 0; r < NB; ++r) {
          const __m256 w = Weight<W>::Load8(b + (col + r) * ldb + i);
          OCTET_UNROLL for (int m = 0; m < MB; ++m) {
            acc[r][m] = _mm256_fmadd_ps(w, x[m], acc[r][m]);
          }
        }
        i += 8;
      }
      OCTET_UNROLL for (int r = 0; r < NB; ++r) {
        OCTET_UNROLL for (int m = 0; m < MB; ++m) {
          float sum = HorizontalSum(acc[r][m]);
          for (int64_t t = i; t < k; ++t) {
            // Fused, as the vector steps (inlined: built with -mfma).
            sum = __builtin_fmaf(
                a[m * lda + t], Weight<W>::Scalar(b[(col + r) * ldb + t]), sum);
          }
          c[m * ldc + r] = sum;
        }
      }
    }
  };
};

int64_t Padded(int64_t k) { return (k + kAlign - 1) / kAlign * kAlign; }

void PrepareE4m3(const uint8_t* q, int64_t m, int64_t k, int64_t ld,
                 void* dst) {
  float* out = static_cast<float*>(dst);
  const int64_t kp = Padded(k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < kp; ++i) {
      out[r * ld + i] = i < k ? kE4m3DecodeTable[q[r * k + i]] : 0.0f;
    }
  }
}

void PrepareBf16(const Bf16* a, int64_t m, int64_t k, int64_t ld, void* dst) {
  float* out = static_cast<float*>(dst);
  const int64_t kp = Padded(k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < kp; ++i) {
      out[r * ld + i] = i < k ? Bf16Value(a[r * k + i]) : 0.0f;
    }
  }
}

// e4m3 weight rows -> binary32 times 2^-8 (as the streaming tile sees them).
void ConvertE4m3(const uint8_t* q, int64_t rows, int64_t k, int64_t ld,
                 void* dst) {
  float* out = static_cast<float*>(dst);
  const int64_t kp = Padded(k);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      __m256 lo, hi;
      DecodeE4m3x16(q + r * k + i, lo, hi);
      _mm256_storeu_ps(out + r * ld + i, lo);
      _mm256_storeu_ps(out + r * ld + i + 8, hi);
    }
    if (i + 8 <= k) {
      _mm256_storeu_ps(out + r * ld + i, DecodeE4m3x8(q + r * k + i));
      i += 8;
    }
    for (; i < kp; ++i) {
      out[r * ld + i] = i < k ? Weight<uint8_t>::Scalar(q[r * k + i]) : 0.0f;
    }
  }
}

template <typename W>
void Rows(const void* a, int64_t lda, int64_t m, const W* b, int64_t ldb,
          int64_t k, int64_t n0, int64_t n1, float* c, int64_t ldc,
          const KBlocks& blocks) {
  RowsDriver<kRowsPerTile, kMaxMPerTile, TileOf<W>::template Tile>(
      a, lda, m, b, ldb, k, n0, n1, c, ldc, blocks, ldb * int64_t{sizeof(W)});
}

void PreparedRows(const void* a, int64_t lda, int64_t m, const void* b,
                  int64_t ldb, int64_t k, int64_t n0, int64_t n1, float* c,
                  int64_t ldc, const KBlocks& blocks) {
  Rows(a, lda, m, static_cast<const float*>(b), ldb, k, n0, n1, c, ldc, blocks);
}

}  // namespace

const GemmKernels kGemmAvx2 = {
    .k_align = kAlign,
    .dot_bytes = 4,
    .prepare_a_e4m3 = PrepareE4m3,
    .prepare_a_bf16 = PrepareBf16,
    .e4m3_rows = Rows<uint8_t>,
    .stream_max_m = 8,
    .bf16_rows = Rows<Bf16>,
    .convert_b_e4m3 = ConvertE4m3,
    .prepared_rows = PreparedRows,
    .prepared_rows_per_tile = kRowsPerTile,
    .converted_k_is_padded = false,
    .e4m3_dot_scale = 256.0f,
    .adds_k_blocks = false,
    .e4m3_rows_converting = nullptr,
    .converting_max_m = 0,
    .bf16_panels = nullptr,  // the scalar twins
    .e4m3_panels = nullptr,
};

}  // namespace octet::cpu_internal
