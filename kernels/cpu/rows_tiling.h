// Internal: the loop nest of the GEMM rows kernels, shared by the
// instruction-set kernels. Include only from those translation units; it has
// internal linkage for the reason given in e4m3_simd.h.
//
// Tile<NB, MB>::Run(a, lda, b, ldb, k, col, row0, c, ldc) computes output
// columns [col, col + NB) for activation rows [row0, row0 + MB), writing
// them to c[m * ldc + r] (c is the tile's own corner: the caller offsets
// it by row0 rows and col columns, so that a tile can also write into a
// buffer of its own size). The driver
// walks the columns in blocks whose weights fit in L2 (so that every group of
// activation rows reuses them from cache), and within a block the activation
// rows kMaxMb at a time, NB columns at a time (then one at a time). With
// several K blocks (gemm_kernels.h) a tile runs every block in turn before
// the next tile, so the weight rows are still read front to back.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/tree_sum.h"

// Fully unrolls a loop over a tile's compile-time extent, so that the
// accumulator arrays live in registers (without it GCC 12 keeps a 4x4 tile's
// accumulators on the stack and reloads them every step).
#define OCTET_UNROLL _Pragma("GCC unroll 16")

namespace octet::cpu_internal {
namespace {  // NOLINT(build/namespaces): see above

// Weight bytes per column block: half of a 2 MiB L2, or of a 1 MiB one.
constexpr int64_t kColumnBlockBytes = int64_t{256} << 10;

// Weight rows per column block: as many rows of `b_row_bytes` as fit in
// kColumnBlockBytes, a multiple of the tile's kNb (at least one tile).
template <int kNb>
int64_t ColumnBlockRows(int64_t b_row_bytes) {
  const int64_t rows = kColumnBlockBytes / (b_row_bytes > 0 ? b_row_bytes : 1);
  return rows < kNb ? kNb : rows / kNb * kNb;
}

template <int NB, int MB, template <int, int> class Tile, typename W>
void RunRowTile(int64_t mb, const void* a, int64_t lda, const W* b, int64_t ldb,
                int64_t k, int64_t col, int64_t row0, float* c, int64_t ldc) {
  if constexpr (MB > 1) {
    if (mb < MB) {
      RunRowTile<NB, MB - 1, Tile>(mb, a, lda, b, ldb, k, col, row0, c, ldc);
      return;
    }
  }
  Tile<NB, MB>::Run(a, lda, b, ldb, k, col, row0, c + row0 * ldc + col, ldc);
}

// Tile<NB, MB> over every K block.
template <int NB, int MB, template <int, int> class Tile, typename W>
void RunBlocks(int64_t mb, const void* a, int64_t lda, const W* b, int64_t ldb,
               int64_t k, int64_t col, int64_t row0, float* c, int64_t ldc,
               const KBlocks& blocks) {
  for (int64_t j = 0; j < blocks.count; ++j) {
    RunRowTile<NB, MB, Tile>(
        mb, static_cast<const char*>(a) + j * blocks.a_bytes, lda,
        reinterpret_cast<const W*>(reinterpret_cast<const char*>(b) +
                                   j * blocks.b_bytes),
        ldb, k, col, row0, c + j * blocks.c_floats, ldc);
  }
}

template <int kNb, int kMaxMb, template <int, int> class Tile, typename W>
void RowsDriver(const void* a, int64_t lda, int64_t m, const W* b, int64_t ldb,
                int64_t k, int64_t n_begin, int64_t n_end, float* c,
                int64_t ldc, const KBlocks& blocks, int64_t b_row_bytes) {
  const int64_t block = ColumnBlockRows<kNb>(b_row_bytes);
  for (int64_t c0 = n_begin; c0 < n_end; c0 += block) {
    const int64_t c1 = c0 + block < n_end ? c0 + block : n_end;
    for (int64_t row0 = 0; row0 < m; row0 += kMaxMb) {
      const int64_t mb = m - row0 < kMaxMb ? m - row0 : kMaxMb;
      int64_t col = c0;
      for (; col + kNb <= c1; col += kNb) {
        RunBlocks<kNb, kMaxMb, Tile>(mb, a, lda, b, ldb, k, col, row0, c, ldc,
                                     blocks);
      }
      for (; col < c1; ++col) {
        RunBlocks<1, kMaxMb, Tile>(mb, a, lda, b, ldb, k, col, row0, c, ldc,
                                   blocks);
      }
    }
  }
}

// K is cut into chunks of this many elements (a multiple of every level's
// k_align) by ChunkedRowsDriver. Chunks of 1024 kept a group's activations
// in L1 (6 rows: 12 KiB), but on a Zen 4 VM (bench_gemm, 2026-12-05, the
// four Mistral-7B shapes, three runs of each alternating) chunks of 4096
// ran BF16 at M = 64-512 1-22% faster (e.g. 4096x4096, M = 512: 58.6 ->
// 45.5 ms, 63% -> 81% of a 0.469 TFLOP/s peak), and no slower at M =
// 12-16: the partial sums' loads and stores at every chunk, and the
// passes, cost more than the activations' trips from L2. K = 4096 is now
// one chunk.
constexpr int64_t kKChunk = 4096;

// The accumulators of one tile between K chunks: acc[r][m] (16 binary32
// lanes) at partial[r * ld + m * 16].
struct PartialSums {
  float* partial;
  int64_t ld;
  bool first, last;  // start from zero; reduce into c at the end
};

template <int NB, int MB, template <int, int> class Tile, typename W>
void RunChunkTile(int64_t mb, const void* a, int64_t lda, const W* b,
                  int64_t ldb, int64_t k, int64_t k0, int64_t k1, int64_t col,
                  int64_t row0, float* c, int64_t ldc, const PartialSums& ps) {
  if constexpr (MB > 1) {
    if (mb < MB) {
      RunChunkTile<NB, MB - 1, Tile>(mb, a, lda, b, ldb, k, k0, k1, col, row0,
                                     c, ldc, ps);
      return;
    }
  }
  Tile<NB, MB>::Run(a, lda, b, ldb, k, k0, k1, col, row0, c + row0 * ldc + col,
                    ldc, ps);
}

// The most K blocks whose sums a tile adds itself (SumTileBlocks): 32 x 24
// binary32 sums of a 4 x 6 tile, 3 KiB on the stack.
constexpr int64_t kTileSumBlocks = 32;

// Whether SumTileBlocks leaves the blocks' sums for AddBlockSums to add.
inline bool BlocksLeftToAdd(const KBlocks& blocks) {
  return blocks.count > kTileSumBlocks;
}

// The blocks' sums of one NB x MB tile added in TreeSum order
// (kernels/tree_sum.h) into out[m * ldc + r]: `run(c, ldc, blocks)` runs the
// tile over every K block of `blocks`, writing block j's sums at c + j *
// blocks.c_floats; here into a local array, so that only the total reaches
// memory (eight blocks' sums of a prefill's row-parallel layer would be
// written out and read back: 8 x the output). More blocks than
// kTileSumBlocks go to out block by block, for AddBlockSums.
template <int NB, int MB, typename RunAll>
void SumTileBlocks(const KBlocks& blocks, float* out, int64_t ldc, RunAll run) {
  if (blocks.count == 1 || BlocksLeftToAdd(blocks)) {
    run(out, ldc, blocks);
    return;
  }
  float local[kTileSumBlocks * NB * MB];
  KBlocks into = blocks;
  into.c_floats = NB * MB;
  run(local, NB, into);
  TreeSum(local, blocks.count, NB * MB, NB * MB);
  OCTET_UNROLL for (int m = 0; m < MB; ++m) {
    OCTET_UNROLL for (int r = 0; r < NB; ++r) {
      out[m * ldc + r] = local[m * NB + r];
    }
  }
}

// Rows [0, m), columns [n_begin, n_end) of every block's sums (at c + j *
// blocks.c_floats) added in TreeSum order into block 0's.
inline void AddBlockSums(float* c, int64_t ldc, int64_t m, int64_t n_begin,
                         int64_t n_end, const KBlocks& blocks) {
  for (int64_t row = 0; row < m; ++row) {
    TreeSum(c + row * ldc + n_begin, blocks.count, blocks.c_floats,
            n_end - n_begin);
  }
}

// Tile<NB, MB> over the whole K of every block (one chunk), the blocks'
// sums added (SumTileBlocks): the tile's own RunBlocks(a, lda, b, ldb, k,
// col, row0, c, ldc, blocks, extra...) where it has one (one set-up for all
// the blocks; `extra`: its further arguments), else Run once per block.
template <int NB, int MB, template <int, int> class Tile, typename W,
          typename... Extra>
void RunTileBlocks(int64_t mb, const void* a, int64_t lda, const W* b,
                   int64_t ldb, int64_t k, int64_t col, int64_t row0, float* c,
                   int64_t ldc, const KBlocks& blocks, const Extra&... extra) {
  if constexpr (MB > 1) {
    if (mb < MB) {
      RunTileBlocks<NB, MB - 1, Tile>(mb, a, lda, b, ldb, k, col, row0, c, ldc,
                                      blocks, extra...);
      return;
    }
  }
  SumTileBlocks<NB, MB>(
      blocks, c + row0 * ldc + col, ldc,
      [&](float* out, int64_t ld, const KBlocks& into) {
        if constexpr (requires { &Tile<NB, MB>::RunBlocks; }) {
          Tile<NB, MB>::RunBlocks(a, lda, b, ldb, k, col, row0, out, ld, into,
                                  extra...);
        } else {
          static_assert(sizeof...(Extra) == 0);
          const PartialSums whole{nullptr, 0, true, true};
          for (int64_t j = 0; j < into.count; ++j) {
            Tile<NB, MB>::Run(
                static_cast<const char*>(a) + j * into.a_bytes, lda,
                reinterpret_cast<const W*>(reinterpret_cast<const char*>(b) +
                                           j * into.b_bytes),
                ldb, k, 0, k, col, row0, out + j * into.c_floats, ld, whole);
          }
        }
      });
}

// As RowsDriver, for compute-bound GEMMs: within a column block and a group
// of kMaxMb activation rows, K is walked in chunks of kKChunk, every tile of
// the block finishing a chunk before the next. A group's chunk of
// activations (kMaxMb rows x kKChunk) then stays in the inner caches while
// the block's weights stream past it from L2 (long K: 14336 in Mistral's
// down_proj). A tile keeps its vector accumulators in `PartialSums` between
// chunks (Tile<NB, MB>::Run(a, lda, b, ldb, k, k0, k1, col, row0, c, ldc,
// ps) runs K elements [k0, k1)), so each lane adds the same products in the
// same order as without chunks: the bits do not change. With one group of
// rows there is nothing to reuse, and K is one chunk; so it is without
// `partial` (null: no memory for it), and when K fits one chunk. In one
// chunk a tile runs every K block in turn before the next tile (as
// RowsDriver) and adds the blocks' sums itself (SumTileBlocks); with
// several, each block is a pass of its own, added at the end. Either way
// c's block 0 holds the blocks' TreeSum on return (gemm_kernels.h,
// GemmKernels::adds_k_blocks), and the other blocks' places are scratch.
template <int kNb, int kMaxMb, template <int, int> class Tile, typename W>
void ChunkedRowsDriver(const void* a, int64_t lda, int64_t m, const W* b,
                       int64_t ldb, int64_t k, int64_t n_begin, int64_t n_end,
                       float* c, int64_t ldc, const KBlocks& blocks,
                       int64_t b_row_bytes, float* partial) {
  const int64_t block = ColumnBlockRows<kNb>(b_row_bytes);
  if (m <= kMaxMb || partial == nullptr || k <= kKChunk) {  // one chunk
    // As RowsDriver: a tile runs every K block in turn before the next
    // tile, so that its weight rows are read front to back, not a block's
    // slice of every row per pass (narrow blocks: 24 codes of SmolLM2's
    // o_proj rows).
    for (int64_t c0 = n_begin; c0 < n_end; c0 += block) {
      const int64_t c1 = c0 + block < n_end ? c0 + block : n_end;
      for (int64_t row0 = 0; row0 < m; row0 += kMaxMb) {
        const int64_t mb = m - row0 < kMaxMb ? m - row0 : kMaxMb;
        int64_t col = c0;
        for (; col + kNb <= c1; col += kNb) {
          RunTileBlocks<kNb, kMaxMb, Tile>(mb, a, lda, b, ldb, k, col, row0, c,
                                           ldc, blocks);
        }
        for (; col < c1; ++col) {
          RunTileBlocks<1, kMaxMb, Tile>(mb, a, lda, b, ldb, k, col, row0, c,
                                         ldc, blocks);
        }
      }
    }
    if (BlocksLeftToAdd(blocks)) {
      AddBlockSums(c, ldc, m, n_begin, n_end, blocks);
    }
    return;
  }
  const int64_t ld = kMaxMb * 16;  // partial floats per column
  for (int64_t j = 0; j < blocks.count; ++j) {
    const void* aj = static_cast<const char*>(a) + j * blocks.a_bytes;
    const W* bj = reinterpret_cast<const W*>(reinterpret_cast<const char*>(b) +
                                             j * blocks.b_bytes);
    float* cj = c + j * blocks.c_floats;
    for (int64_t c0 = n_begin; c0 < n_end; c0 += block) {
      const int64_t c1 = c0 + block < n_end ? c0 + block : n_end;
      for (int64_t row0 = 0; row0 < m; row0 += kMaxMb) {
        const int64_t mb = m - row0 < kMaxMb ? m - row0 : kMaxMb;
        for (int64_t k0 = 0; k0 < k; k0 += kKChunk) {
          const int64_t k1 = k0 + kKChunk < k ? k0 + kKChunk : k;
          const bool first = k0 == 0, last = k1 == k;
          int64_t col = c0;
          for (; col + kNb <= c1; col += kNb) {
            RunChunkTile<kNb, kMaxMb, Tile>(
                mb, aj, lda, bj, ldb, k, k0, k1, col, row0, cj, ldc,
                {partial + (col - c0) * ld, ld, first, last});
          }
          for (; col < c1; ++col) {
            RunChunkTile<1, kMaxMb, Tile>(
                mb, aj, lda, bj, ldb, k, k0, k1, col, row0, cj, ldc,
                {partial + (col - c0) * ld, ld, first, last});
          }
        }
      }
    }
  }
  if (blocks.count > 1) AddBlockSums(c, ldc, m, n_begin, n_end, blocks);
}

// Floats of partial sums ChunkedRowsDriver needs for weight rows of
// `b_row_bytes` bytes.
template <int kNb, int kMaxMb>
int64_t ChunkedPartialFloats(int64_t b_row_bytes) {
  return ColumnBlockRows<kNb>(b_row_bytes) * kMaxMb * 16;
}

}  // namespace
}  // namespace octet::cpu_internal
