// The AVX-512 outer-product GEMMs over bfloat16 and e4m3 panels (panels.h;
// docs/decisions/2026-12-06-cpu-gemm-outer-product.md), compiled with the
// AVX-512 level's flags (BF16 for vdpbf16ps, VBMI for the e4m3 decoder).
//
// A tile is NV vectors of a panel (16 output columns each) by MB activation
// rows. Per K pair it has the NV panel vectors (two K values of 16 columns
// in each), broadcasts each row's pair (4 bytes) and takes NV x MB
// vdpbf16ps: the accumulators are the outputs themselves, never reduced
// across lanes. The bfloat16 tile, 4 x 6, holds 24 accumulators, 4 weight
// vectors and one broadcast in the 32 registers, and loads 10 vectors per
// 24 products, where the rows kernels also reduce every accumulator at the
// end.
//
// An e4m3 tile decodes each 64-code vector in registers into two K pairs
// of its 16 columns (E4m3Decoder, e4m3_simd.h) and takes them as the
// bfloat16 tile takes its loads: the same products in the same order as
// the bfloat16 tile over the decoded panel, the same bits. Its shape
// follows M (kE4m3WideMaxM); from kE4m3StagedMinM rows each K chunk is
// decoded once instead, and the bfloat16 tile runs over it.
//
// Each output adds its K pairs in order from zero, one vdpbf16ps per pair,
// whatever the tile, the path, the row's place in the batch, the K chunk
// or the thread: a row's bits do not depend on M, and a K block's sums are
// the accumulators stored at its end.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/e4m3_simd.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/rows_tiling.h"

namespace octet::cpu_internal {
namespace {

constexpr int kPanelVectors = 4;  // 16 * 4 = kPanelColumns
constexpr int kRowsPerTile = 6;
// K pairs per chunk: every row group runs over one chunk of a panel before
// the next, so that it is read from L2 (64 columns x 512 K values: 64 KiB
// of bfloat16) rather than from memory once per row group when the panel
// is larger than L2 (K = 14336: 1.8 MiB). The sums go on from the last
// chunk's.
constexpr int64_t kChunkPairs = 256;
// The e4m3 GEMM by M. Up to kE4m3WideMaxM rows, tiles of whole panels (4
// vectors) by 4 rows, reading the panel front to back; up to
// kE4m3StagedMinM, 2 vectors by 10 rows (20 accumulators, 4 decoded
// vectors, 2 broadcasts and the decoder's 5: 31 of the 32 registers), each
// vector decoded in registers serving 10 rows; from kE4m3StagedMinM, each K
// chunk decoded once into L1/L2 for the bfloat16 tile (E4m3Staged), its
// decoding amortised over every row.
// (bench_gemm --panels on a Zen 4 VM, 2026-12-06, bf16p over fp8p, the
// GEMMs alone: 4 x 4 1.09-1.43x at M = 5 where 2 x 8 ran 1.00-1.16x. At
// M = 128 and 512, two runs each: 2 x 10 0.90-0.99x (median 0.94) on the
// four Mistral-7B shapes, where 2 x 8 ran 0.86-0.98x (median 0.91, two
// shapes); slower were 1 x 16 and 1 x 20 (a broadcast for each product:
// 0.66-0.89x), 3 x 6 (0.75-0.87x), 2 x 12 (spills: 0.87-0.97x), the
// broadcasts folded into vdpbf16ps as {1to16} operands (0.87-0.95x), and
// decoding 64 pairs at a time into L1 (0.85-0.92x). Decoding a whole chunk
// once gained only with the next chunk's codes fetched ahead, two runs
// each against 2 x 10 in the same run: M = 64 0.96-1.09x (2 x 10
// 0.94-1.05x), M = 96 0.96-1.03x (0.92-0.98x), M = 128 0.97-1.02x, median
// 0.99 (0.92-0.97x, 0.95), M = 512 0.97-1.00x, 0.98 (0.89-0.95x, 0.93);
// and lost at M = 16 (0.88-0.97x, 1.04-1.18x) and 32 (0.86-1.01x,
// 0.92-1.07x).)
constexpr int kE4m3WideMaxM = 8;
constexpr int kE4m3WideTileRows = 4;
constexpr int kE4m3TileVectors = 2;
constexpr int kE4m3TileRows = 10;
constexpr int64_t kE4m3StagedMinM = 64;

// A tile's accumulators at the start of a K chunk: zero (first) or the
// sums in c; the last vector's lanes past `last` are not read (columns
// past N). And at its end, stored to c but for those lanes.
template <int NV, int MB>
inline void LoadSums(__m512 (&acc)[MB][NV], const float* c, int64_t ldc,
                     __mmask16 last, bool first) {
  OCTET_UNROLL for (int m = 0; m < MB; ++m) {
    OCTET_UNROLL for (int v = 0; v < NV; ++v) {
      const __mmask16 lanes = v == NV - 1 ? last : __mmask16(0xFFFF);
      acc[m][v] = first ? _mm512_setzero_ps()
                        : _mm512_maskz_loadu_ps(lanes, c + m * ldc + 16 * v);
    }
  }
}
template <int NV, int MB>
inline void StoreSums(__m512 (&acc)[MB][NV], float* c, int64_t ldc,
                      __mmask16 last) {
  OCTET_UNROLL for (int m = 0; m < MB; ++m) {
    OCTET_UNROLL for (int v = 0; v < NV; ++v) {
      const __mmask16 lanes = v == NV - 1 ? last : __mmask16(0xFFFF);
      _mm512_mask_storeu_ps(c + m * ldc + 16 * v, lanes, acc[m][v]);
    }
  }
}

// The bfloat16 pair at a (4 bytes), in every lane.
inline __m512bh BroadcastPair(const Bf16* a) {
  int32_t bits;
  std::memcpy(&bits, a, sizeof(bits));
  return (__m512bh)_mm512_set1_epi32(bits);
}

// c[m][16 NV] (ldc apart) = its sums so far (or zero: first) + rows a[m]
// (bfloat16, lda elements apart) times pairs [p0, p1) of a bfloat16 panel
// of NV vectors, for MB rows.
template <int NV, int MB>
struct PanelTile {
  [[gnu::noinline]] static void Run(const Bf16* a, int64_t lda,
                                    const Bf16* panel, int64_t p0, int64_t p1,
                                    float* c, int64_t ldc, __mmask16 last,
                                    bool first) {
    __m512 acc[MB][NV];
    LoadSums<NV, MB>(acc, c, ldc, last, first);
    for (int64_t pair = p0; pair < p1; ++pair) {
      __m512i w[NV];
      OCTET_UNROLL for (int v = 0; v < NV; ++v) {
        w[v] = _mm512_loadu_si512(panel + (pair * NV + v) * 32);
      }
      OCTET_UNROLL for (int m = 0; m < MB; ++m) {
        const __m512bh x = BroadcastPair(a + m * lda + 2 * pair);
        OCTET_UNROLL for (int v = 0; v < NV; ++v) {
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x, (__m512bh)w[v]);
        }
      }
    }
    StoreSums<NV, MB>(acc, c, ldc, last);
  }
};

// NV vectors of an e4m3 panel, from `codes` on, whose K steps are
// `stride` vectors apart (the panel's width / 16).
struct E4m3Vectors {
  const uint8_t* codes;
  int64_t stride;
};

// As PanelTile over steps [s0, s1) (4 K values each) of NV vectors of an
// e4m3 panel, each vector decoded in registers into its two pairs: the
// same products in the same order as PanelTile over the decoded panel.
template <int NV, int MB>
struct E4m3PanelTile {
  [[gnu::noinline]] static void Run(const Bf16* a, int64_t lda,
                                    E4m3Vectors panel, int64_t s0, int64_t s1,
                                    float* c, int64_t ldc, __mmask16 last,
                                    bool first) {
    const E4m3Decoder dec;
    __m512 acc[MB][NV];
    LoadSums<NV, MB>(acc, c, ldc, last, first);
    for (int64_t s = s0; s < s1; ++s) {
      __m512i w0[NV], w1[NV];
      OCTET_UNROLL for (int v = 0; v < NV; ++v) {
        dec.Decode(
            _mm512_loadu_si512(panel.codes + (s * panel.stride + v) * 64),
            w0[v], w1[v]);
      }
      OCTET_UNROLL for (int m = 0; m < MB; ++m) {
        const __m512bh x0 = BroadcastPair(a + m * lda + 4 * s);
        const __m512bh x1 = BroadcastPair(a + m * lda + 4 * s + 2);
        OCTET_UNROLL for (int v = 0; v < NV; ++v) {
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x0, (__m512bh)w0[v]);
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x1, (__m512bh)w1[v]);
        }
      }
    }
    StoreSums<NV, MB>(acc, c, ldc, last);
  }
};

// Tile<NV, rows> for the last rows (< MB) of a panel.
template <template <int, int> class Tile, int NV, int MB, typename W>
void RowTile(int64_t rows, const Bf16* a, int64_t lda, W panel, int64_t k0,
             int64_t k1, float* c, int64_t ldc, __mmask16 last, bool first) {
  if constexpr (MB > 1) {
    if (rows < MB) {
      RowTile<Tile, NV, MB - 1>(rows, a, lda, panel, k0, k1, c, ldc, last,
                                first);
      return;
    }
  }
  Tile<NV, MB>::Run(a, lda, panel, k0, k1, c, ldc, last, first);
}

// Every row group of MB rows of a tile over K steps [k0, k1) of a panel.
template <template <int, int> class Tile, int NV, int MB, typename W>
void RowGroups(const Bf16* a, int64_t lda, int64_t m, W panel, int64_t k0,
               int64_t k1, float* c, int64_t ldc, __mmask16 last, bool first) {
  for (int64_t row = 0; row < m; row += MB) {
    const int64_t rows = m - row < MB ? m - row : MB;
    RowTile<Tile, NV, MB>(rows, a + row * lda, lda, panel, k0, k1,
                          c + row * ldc, ldc, last, first);
  }
}

// Every row over steps [s0, s1) (one K chunk) of an e4m3 panel of NV
// vectors, many rows: the chunk decoded once into this thread's buffer,
// then the bfloat16 tile over it, which takes the decoded pairs in the
// order E4m3PanelTile does (the same bits). While decoding, the next
// chunk's codes (the panels lie in one stream) are fetched into L2, so
// that its decoding does not wait on memory with no products to hide it.
template <int NV>
void E4m3Staged(const Bf16* a, int64_t lda, int64_t m, const uint8_t* panel,
                int64_t s0, int64_t s1, float* c, int64_t ldc, __mmask16 last,
                bool first) {
  alignas(64) static thread_local Bf16 staged[kChunkPairs * kPanelVectors * 32];
  constexpr uintptr_t kAhead = kChunkPairs / 2 * NV * 64;  // a chunk's codes
  const E4m3Decoder dec;
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t pair = 2 * (s - s0);
    OCTET_UNROLL for (int v = 0; v < NV; ++v) {
      const uint8_t* codes = panel + (s * NV + v) * 64;
      // An address, never dereferenced: it may lie past the panels' end.
      _mm_prefetch(reinterpret_cast<const char*>(
                       reinterpret_cast<uintptr_t>(codes) + kAhead),
                   _MM_HINT_T1);
      __m512i w0, w1;
      dec.Decode(_mm512_loadu_si512(codes), w0, w1);
      _mm512_store_si512(staged + (pair * NV + v) * 32, w0);
      _mm512_store_si512(staged + ((pair + 1) * NV + v) * 32, w1);
    }
  }
  RowGroups<PanelTile, NV, kRowsPerTile>(a + 4 * s0, lda, m, staged, 0,
                                         2 * (s1 - s0), c, ldc, last, first);
}

// Every row over steps [s0, s1) of an e4m3 panel of NV vectors: up to
// kE4m3WideMaxM rows the whole panel's vectors kE4m3WideTileRows rows at a
// time; from kE4m3StagedMinM, decoded once (E4m3Staged); between,
// kE4m3TileVectors vectors (the last ones fewer) by kE4m3TileRows rows.
template <int NV>
void E4m3Rows(const Bf16* a, int64_t lda, int64_t m, const uint8_t* panel,
              int64_t s0, int64_t s1, float* c, int64_t ldc, __mmask16 last,
              bool first) {
  if (m <= kE4m3WideMaxM) {
    RowGroups<E4m3PanelTile, NV, kE4m3WideTileRows>(
        a, lda, m, E4m3Vectors{panel, NV}, s0, s1, c, ldc, last, first);
    return;
  }
  if (m >= kE4m3StagedMinM) {
    E4m3Staged<NV>(a, lda, m, panel, s0, s1, c, ldc, last, first);
    return;
  }
  constexpr int kTv = kE4m3TileVectors < NV ? kE4m3TileVectors : NV;
  int v0 = 0;
  for (; v0 + kTv < NV; v0 += kTv) {  // not the last vector: all lanes
    RowGroups<E4m3PanelTile, kTv, kE4m3TileRows>(
        a, lda, m, E4m3Vectors{panel + v0 * 64, NV}, s0, s1, c + 16 * v0, ldc,
        __mmask16(0xFFFF), first);
  }
  constexpr int kRest = NV % kTv == 0 ? kTv : NV % kTv;
  RowGroups<E4m3PanelTile, kRest, kE4m3TileRows>(
      a, lda, m, E4m3Vectors{panel + v0 * 64, NV}, s0, s1, c + 16 * v0, ldc,
      last, first);
}

// Every row of one K block of one panel of `vectors` (<= NV) vectors,
// chunk by chunk of K: `pairs` pairs of bfloat16, or pairs / 2 steps of
// e4m3.
template <int NV, typename W>
void PanelRows(int vectors, const Bf16* a, int64_t lda, int64_t m,
               const W* panel, int64_t pairs, float* c, int64_t ldc,
               __mmask16 last) {
  if constexpr (NV > 1) {
    if (vectors < NV) {
      PanelRows<NV - 1>(vectors, a, lda, m, panel, pairs, c, ldc, last);
      return;
    }
  }
  for (int64_t p0 = 0; p0 < pairs; p0 += kChunkPairs) {
    const int64_t p1 = p0 + kChunkPairs < pairs ? p0 + kChunkPairs : pairs;
    if constexpr (sizeof(W) == 2) {
      RowGroups<PanelTile, NV, kRowsPerTile>(a, lda, m, panel, p0, p1, c, ldc,
                                             last, p0 == 0);
    } else {
      E4m3Rows<NV>(a, lda, m, panel, p0 / 2, p1 / 2, c, ldc, last, p0 == 0);
    }
  }
}

// The panels kernel (gemm_kernels.h) over bfloat16 or e4m3 panels.
template <typename W>
void Panels(const Bf16* a, int64_t lda, int64_t m, const W* panels, int64_t n,
            int64_t kb_pad, int64_t n_begin, int64_t n_end, float* c,
            int64_t ldc, const KBlocks& blocks) {
  const int64_t n_pad = (n + 15) / 16 * 16;
  const int64_t panel_k = blocks.count * kb_pad;  // packed K of a column
  for (int64_t c0 = n_begin; c0 < n_end; c0 += kPanelColumns) {
    const int64_t width =
        n_pad - c0 < kPanelColumns ? n_pad - c0 : kPanelColumns;
    // The columns of the panel's last vector that are not padding: 1 .. 16.
    const int64_t last_columns = n - (c0 + width - 16);
    const __mmask16 last =
        last_columns >= 16 ? __mmask16(0xFFFF)
                           : static_cast<__mmask16>((1u << last_columns) - 1);
    for (int64_t j = 0; j < blocks.count; ++j) {
      const Bf16* block_a = reinterpret_cast<const Bf16*>(
          reinterpret_cast<const char*>(a) + j * blocks.a_bytes);
      PanelRows<kPanelVectors>(static_cast<int>(width / 16), block_a, lda, m,
                               panels + c0 * panel_k + j * kb_pad * width,
                               kb_pad / 2, c + j * blocks.c_floats + c0, ldc,
                               last);
    }
  }
}

}  // namespace

// Data, not code, is what an instruction-set unit may make visible
// (tests/build/check_isa_symbols.cmake); constant-initialized, so that
// kGemmAvx512, initialized from them in another unit, never sees them unset.
constinit const PanelsKernel<Bf16> kBf16PanelsAvx512 = Panels<Bf16>;
constinit const PanelsKernel<uint8_t> kE4m3PanelsAvx512 = Panels<uint8_t>;

}  // namespace octet::cpu_internal
