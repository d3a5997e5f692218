// Internal: the GEMM's per-instruction-set kernels, which the driver
// (gemm.cc) calls. One table per level, each in its own translation unit
// built with that level's flags.
//
// Two kinds of kernel. The panels kernels (PanelsKernel) take outer
// products over weights packed at load (panels.h): what the AVX-512 level
// runs for weights laid out that way. The rest compute dot products along
// K ("rows" kernels): an output column is the dot product of one activation
// row and one weight row, both contiguous in memory, so weights are read
// straight from their row-major [N][K] layout with no transposition or
// packing. Tiles of a few weight rows times a few activation rows share
// each loaded vector.
//
// The activations A are first "prepared" by the driver into the level's dot
// format (padded to a multiple of k_align with zeros):
//   scalar, avx2: binary32, natural K order
//   avx512:       bfloat16 for vdpbf16ps; for the e4m3 GEMM in the K order
//                 that the weight decoder produces (see gemm_avx512.cc)
// Float8 weights are either decoded on the fly (streaming: small M, where
// the GEMM is memory-bound and FP8 halves the bytes) or, for larger M,
// converted once per block into the same format as prepared A and run
// through the prepared kernel, so that each weight is decoded once (on
// AVX-512 by the first rows' streaming kernel, which writes the block as it
// decodes it: e4m3_rows_converting).
//
// Kernels write raw binary32 sums; the driver scales and converts them
// (the epilogue), so that no kernel translation unit shares an inline
// function with the rest of the program (see e4m3_simd.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/bf16.h"
#include "kernels/cpu/panels.h"

namespace octet::cpu_internal {

// K cut into blocks that are summed separately (gemm.h, *BlockSums): block
// j's prepared activations start at a + j * a_bytes, its weights at
// b + j * b_bytes, and its sums go to c + j * c_floats (but see
// GemmKernels::adds_k_blocks). Each block is computed exactly as a GEMM
// whose whole K it were. The default: one block.
struct KBlocks {
  int64_t count = 1;
  int64_t a_bytes = 0, b_bytes = 0, c_floats = 0;
};

// A rows kernel: c[row * ldc + col] = sum_i a[row][i] * b[col][i] for rows
// [0, m), columns [n_begin, n_end); a is prepared ([m][lda], lda a multiple
// of k_align), b is [n][ldb] and k elements of each row are used; so for
// every block of `blocks`.
template <typename W>
using RowsKernel = void (*)(const void* a, int64_t lda, int64_t m, const W* b,
                            int64_t ldb, int64_t k, int64_t n_begin,
                            int64_t n_end, float* c, int64_t ldc,
                            const KBlocks& blocks);

// A panels kernel: the outer-product GEMM over weights packed into panels
// (panels.h; W: Bf16 or e4m3 bytes) for a weight of n columns in
// blocks.count K blocks of kb_pad packed values each (the block length
// rounded up to the format's K step). For every block j, c + j *
// blocks.c_floats gets c[row * ldc + col] = the binary32 sum, from zero and
// in K order one pair at a time, of the products of row `row` of the
// block's activations and column col's weights, for rows [0, m) and columns
// [n_begin, n_end) (n_begin a multiple of kPanelColumns). The activations
// are bfloat16 (e4m3 ones decoded exactly), block j's [m][lda] at a + j *
// blocks.a_bytes bytes, each row's block padded to kb_pad with zeros.
template <typename W>
using PanelsKernel = void (*)(const Bf16* a, int64_t lda, int64_t m,
                              const W* panels, int64_t n, int64_t kb_pad,
                              int64_t n_begin, int64_t n_end, float* c,
                              int64_t ldc, const KBlocks& blocks);

struct GemmKernels {
  int k_align;       // prepared rows are padded to a multiple of this
  size_t dot_bytes;  // bytes per prepared element (4: binary32, 2: bf16)

  // Prepare activations: dst is [m][ld], each row's first round_up(k,
  // k_align) elements written (zero past k); ld >= round_up(k, k_align).
  void (*prepare_a_e4m3)(const uint8_t* qa, int64_t m, int64_t k, int64_t ld,
                         void* dst);
  void (*prepare_a_bf16)(const Bf16* a, int64_t m, int64_t k, int64_t ld,
                         void* dst);

  // Streaming kernels over the raw weights.
  RowsKernel<uint8_t> e4m3_rows;
  // For M above this the e4m3 GEMM converts weight blocks once instead of
  // decoding them on the fly in e4m3_rows for every group of activation
  // rows (where the decode costs more than converting does).
  int stream_max_m;
  RowsKernel<Bf16> bf16_rows;

  // e4m3 weight rows -> prepared format (as prepare_a_e4m3, [rows][ld]),
  // and the kernel over prepared weights.
  void (*convert_b_e4m3)(const uint8_t* b, int64_t rows, int64_t k, int64_t ld,
                         void* dst);
  RowsKernel<void> prepared_rows;
  // Weight rows per prepared_rows tile: blocks of converted weights are
  // made a multiple of it, so that no block ends in narrower tiles.
  int prepared_rows_per_tile;

  // The K that prepared_rows is given over converted weights: the one that
  // makes it add the same products in the same order as e4m3_rows, so that
  // a row's result does not depend on M (batch invariance; see gemm_test).
  // True: round_up(k, k_align) (the decoder-ordered AVX-512 layout, whose
  // streaming kernel also covers whole padded blocks); false: k.
  bool converted_k_is_padded;

  // e4m3 sums (from e4m3_rows or prepared_rows) are dot / e4m3_dot_scale,
  // an exact power of two (the AVX2 decoder carries values times 2^-8).
  float e4m3_dot_scale;

  // With several K blocks, false: the rows kernels write every block's
  // sums, which the driver adds in TreeSum order (kernels/tree_sum.h);
  // true: they add them themselves, in that order, and return the total in
  // block 0's place (the other blocks' places are scratch): a tile adds its
  // blocks' sums before they leave the core, and the output is written once
  // rather than once per block (rows_tiling.h, SumTileBlocks).
  bool adds_k_blocks;

  // Optional (null: convert_b_e4m3, then prepared_rows for every row). The
  // first rows of a converted e4m3 GEMM: e4m3_rows over m <= converting_max_m
  // rows and columns [n_begin, n_end) that also writes each weight row it
  // decodes, as convert_b_e4m3 would, to `converted`: K block j's row col at
  // converted + j * converted_block_bytes, (col - n_begin) rows of
  // converted_ld elements in. The weights are then read from memory while
  // those rows' dot products run, not in a pass of their own that waits on
  // memory; prepared_rows takes the other rows over the converted block.
  // The sums are e4m3_rows' (and prepared_rows'): the same bits.
  void (*e4m3_rows_converting)(const void* a, int64_t lda, int64_t m,
                               const uint8_t* b, int64_t ldb, int64_t k,
                               int64_t n_begin, int64_t n_end, float* c,
                               int64_t ldc, const KBlocks& blocks,
                               void* converted, int64_t converted_ld,
                               int64_t converted_block_bytes);
  int converting_max_m;

  // The outer-product GEMMs over bfloat16 and e4m3 panels; null: the level
  // runs the scalar level's (the panels are laid out for AVX-512's
  // vectors). Both give the same bits for the same values.
  PanelsKernel<Bf16> bf16_panels;
  PanelsKernel<uint8_t> e4m3_panels;
};

extern const GemmKernels kGemmScalar;
#if defined(OCTET_X86)
extern const GemmKernels kGemmAvx2;
extern const GemmKernels kGemmAvx512;
// kGemmAvx512's panels kernels (gemm_panels_avx512.cc).
extern const PanelsKernel<Bf16> kBf16PanelsAvx512;
extern const PanelsKernel<uint8_t> kE4m3PanelsAvx512;
#endif

}  // namespace octet::cpu_internal
