// The AVX-512 outer-product GEMM over bfloat16 panels (bf16_panels.h;
// docs/decisions/2026-12-06-cpu-gemm-outer-product.md), compiled with the
// AVX-512 level's flags (BF16 for vdpbf16ps).
//
// A tile is NV vectors of a panel (16 output columns each) by MB activation
// rows. Per K pair it loads the NV panel vectors (two K values of 16
// columns in each), broadcasts each row's pair (4 bytes) and takes NV x MB
// vdpbf16ps: the accumulators are the outputs themselves, never reduced
// across lanes. 4 x 6 holds 24 accumulators, 4 weight vectors and one
// broadcast in the 32 registers, and loads 10 vectors per 24 products where
// the rows kernels also reduce every accumulator at the end.
//
// Each output adds its K pairs in order from zero, one vdpbf16ps per pair,
// whatever the tile, the row's place in the batch, the K chunk or the
// thread: a row's bits do not depend on M, and a K block's sums are the
// accumulators stored at its end.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/rows_tiling.h"

namespace octet::cpu_internal {
namespace {

constexpr int kPanelVectors = 4;  // 16 * 4 = kBf16PanelColumns
constexpr int kRowsPerTile = 6;
// K pairs per chunk: every row group runs over one chunk of a panel before
// the next, so that it is read from L2 (64 columns x 512 K values: 64 KiB)
// rather than from memory once per row group when the panel is larger
// than L2 (K = 14336: 1.8 MiB). The sums go on from the last chunk's.
constexpr int64_t kChunkPairs = 256;

// c[m][16 NV] (ldc apart) += rows a[m] (bfloat16 pairs, lda elements
// apart) times pairs [p0, p1) of a panel of NV vectors, for MB rows; the
// sums start from zero (first) or from c. The last vector's lanes past
// `last` are neither read nor written (columns past N).
template <int NV, int MB>
struct PanelTile {
  [[gnu::noinline]] static void Run(const Bf16* a, int64_t lda,
                                    const Bf16* panel, int64_t p0, int64_t p1,
                                    float* c, int64_t ldc, __mmask16 last,
                                    bool first) {
    __m512 acc[MB][NV];
    OCTET_UNROLL for (int m = 0; m < MB; ++m) {
      OCTET_UNROLL for (int v = 0; v < NV; ++v) {
        const __mmask16 lanes = v == NV - 1 ? last : __mmask16(0xFFFF);
        acc[m][v] = first ? _mm512_setzero_ps()
                          : _mm512_maskz_loadu_ps(lanes, c + m * ldc + 16 * v);
      }
    }
    for (int64_t pair = p0; pair < p1; ++pair) {
      __m512i w[NV];
      OCTET_UNROLL for (int v = 0; v < NV; ++v) {
        w[v] = _mm512_loadu_si512(panel + (pair * NV + v) * 32);
      }
      OCTET_UNROLL for (int m = 0; m < MB; ++m) {
        int32_t bits;
        std::memcpy(&bits, a + m * lda + 2 * pair, sizeof(bits));
        const __m512bh x = (__m512bh)_mm512_set1_epi32(bits);
        OCTET_UNROLL for (int v = 0; v < NV; ++v) {
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x, (__m512bh)w[v]);
        }
      }
    }
    OCTET_UNROLL for (int m = 0; m < MB; ++m) {
      OCTET_UNROLL for (int v = 0; v < NV; ++v) {
        const __mmask16 lanes = v == NV - 1 ? last : __mmask16(0xFFFF);
        _mm512_mask_storeu_ps(c + m * ldc + 16 * v, lanes, acc[m][v]);
      }
    }
  }
};

// PanelTile<NV, rows> for the last rows (< MB) of a panel.
template <int NV, int MB>
void RowTile(int64_t rows, const Bf16* a, int64_t lda, const Bf16* panel,
             int64_t p0, int64_t p1, float* c, int64_t ldc, __mmask16 last,
             bool first) {
  if constexpr (MB > 1) {
    if (rows < MB) {
      RowTile<NV, MB - 1>(rows, a, lda, panel, p0, p1, c, ldc, last, first);
      return;
    }
  }
  PanelTile<NV, MB>::Run(a, lda, panel, p0, p1, c, ldc, last, first);
}

// Every row of one K block of one panel of `vectors` (<= NV) vectors,
// chunk by chunk of K pairs.
template <int NV>
void PanelRows(int vectors, const Bf16* a, int64_t lda, int64_t m,
               const Bf16* panel, int64_t pairs, float* c, int64_t ldc,
               __mmask16 last) {
  if constexpr (NV > 1) {
    if (vectors < NV) {
      PanelRows<NV - 1>(vectors, a, lda, m, panel, pairs, c, ldc, last);
      return;
    }
  }
  for (int64_t p0 = 0; p0 < pairs; p0 += kChunkPairs) {
    const int64_t p1 = p0 + kChunkPairs < pairs ? p0 + kChunkPairs : pairs;
    for (int64_t row = 0; row < m; row += kRowsPerTile) {
      const int64_t rows = m - row < kRowsPerTile ? m - row : kRowsPerTile;
      RowTile<NV, kRowsPerTile>(rows, a + row * lda, lda, panel, p0, p1,
                                c + row * ldc, ldc, last, p0 == 0);
    }
  }
}

void Bf16Panels(const Bf16* a, int64_t lda, int64_t m, const Bf16* panels,
                int64_t n, int64_t kb_pad, int64_t n_begin, int64_t n_end,
                float* c, int64_t ldc, const KBlocks& blocks) {
  const int64_t n_pad = (n + 15) / 16 * 16;
  const int64_t panel_k = blocks.count * kb_pad;  // packed K of a column
  for (int64_t c0 = n_begin; c0 < n_end; c0 += kBf16PanelColumns) {
    const int64_t width =
        n_pad - c0 < kBf16PanelColumns ? n_pad - c0 : kBf16PanelColumns;
    const int vectors = static_cast<int>(width / 16);
    // The columns of the panel's last vector that are not padding: 1 .. 16.
    const int64_t last_columns = n - (c0 + width - 16);
    const __mmask16 last =
        last_columns >= 16 ? __mmask16(0xFFFF)
                           : static_cast<__mmask16>((1u << last_columns) - 1);
    for (int64_t j = 0; j < blocks.count; ++j) {
      const Bf16* block_a = reinterpret_cast<const Bf16*>(
          reinterpret_cast<const char*>(a) + j * blocks.a_bytes);
      PanelRows<kPanelVectors>(
          vectors, block_a, lda, m, panels + c0 * panel_k + j * kb_pad * width,
          kb_pad / 2, c + j * blocks.c_floats + c0, ldc, last);
    }
  }
}

}  // namespace

// Data, not code, is what an instruction-set unit may make visible
// (tests/build/check_isa_symbols.cmake); constant-initialized, so that
// kGemmAvx512, initialized from it in another unit, never sees it unset.
constinit const PanelsKernel kBf16PanelsAvx512 = Bf16Panels;

}  // namespace octet::cpu_internal
