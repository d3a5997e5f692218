// AVX-512 GEMM kernels (AVX-512 F/BW/VL/DQ + VBMI + BF16). Every product is
// a vdpbf16ps of two bfloat16 vectors, accumulated in binary32.
//
// Float8 e4m3 values are exactly representable in bfloat16, so the e4m3
// GEMM decodes codes to bfloat16 and shares the arithmetic of the BF16 GEMM.
// Decoding is two 128-entry byte-table lookups (vpermi2b: high and low byte
// of the bfloat16 of the code's magnitude, NaN and subnormals included), the
// sign OR-ed in, and two byte interleaves: about 5 instructions per 64
// weights, so the streaming kernel stays memory-bound.
//
// The interleave (vpunpck{l,h}bw works within 128-bit lanes) produces the 64
// decoded values of a block in a fixed permuted K order. A dot product does
// not care about order as long as both operands share it, so e4m3 activations
// are prepared with the same decoder (same order), and zero codes pad K.
#include <immintrin.h>

#include <cstdlib>

#include "kernels/cpu/e4m3_simd.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/rows_tiling.h"

namespace octet::cpu_internal {
namespace {

constexpr int kAlign = 64;       // K block of the e4m3 decoder
constexpr int kRowsPerTile = 4;  // weight rows per tile
constexpr int kMaxMPerTile = 4;  // activation rows per tile
// The bfloat16 tile (BF16 weights, and e4m3 ones converted for large M):
// more activation rows per tile, so that each weight vector loaded from L2
// serves more of them (NB * MB accumulators + NB weights + 1 activation
// fit in the 32 vector registers). 4 x 6 loads 10 vectors per 24 dot
// products; on a Zen 4 VM (bench_gemm, M = 128 and 512, the four Mistral-7B
// shapes, 2026-12-05) it ran BF16 at 64-74% of the measured peak where
// 3 x 8 (11 loads) ran at 58-69%; 5 x 5 and 6 x 4 were no better, and worse
// at K = 14336.
constexpr int kBf16RowsPerTile = 4;
constexpr int kBf16MaxMPerTile = 6;
// Up to 8 rows, 3 x 8: one pass over the weights where 4 x 6 takes two
// (bench_gemm BF16 at M = 8, the same VM: 4 x 6 15-30% slower than 3 x 8;
// at M = 12 and 16 4 x 6 as fast or faster).
constexpr int kBf16FewRowsPerTile = 3;
constexpr int kBf16FewMaxMPerTile = 8;
constexpr int kBf16FewMMax = 8;
// The streaming e4m3 tile for M above kMaxMPerTile (up to stream_max_m, two
// such tiles): 8 rows share each decoded weight vector, so each weight is
// decoded once per 8 rows rather than per 4. (Measured at M = 16: fp8q /
// bf16 0.84-0.93x this way, 0.75x converting the weights; one tile of 16
// rows, 0.6x.)
constexpr int kE4m3TallRowsPerTile = 2;
constexpr int kE4m3TallMaxMPerTile = 8;
// The largest next tile (NB weight rows) prefetched into L1 (48 KiB here).
constexpr int64_t kL1PrefetchTileBytes = int64_t{16} << 10;

// The lanes of a masked load with `left` elements still to read: all, the
// first `left`, or none. `left` is negative past the end of a row when a
// padded loop steps beyond it (PrepareBf16 pads K to 64 in steps of 32, so
// its last step starts past K when K % 64 is 1..32): no lanes, not a shift
// by a negative count.
inline __mmask64 Mask64(int64_t left) {
  if (left <= 0) return 0;
  return left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
}
inline __mmask32 Mask32(int64_t left) {
  if (left <= 0) return 0;
  return left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
}

inline __m512bh AsBh(__m512i v) { return (__m512bh)v; }

// Sum of the 16 lanes. (Not _mm512_reduce_add_ps: with it GCC 12 keeps a
// tile's accumulators in memory as well as in registers, storing all of them
// on every step of the K loop.)
inline float ReduceAdd(__m512 v) {
  const __m256 s8 =
      _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 =
      _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// ReduceAdd of four vectors at once, each with ReduceAdd's own additions in
// its order (so the same bits), in 8 shuffles and 5 adds rather than ~36
// operations: the sums of a, b, c, d in lanes 0, 4, 8, 12. Narrow K blocks
// (row-parallel block sums) reduce a tile's accumulators once per block,
// where this is a large part of the work.
inline __m512 ReduceAdd4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // 256-bit halves: quarters [a0+a2, a1+a3, b0+b2, b1+b3] (q: 4 lanes).
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44),
                                  _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44),
                                  _mm512_shuffle_f32x4(c, d, 0xEE));
  // 128-bit halves: one quarter per input, [s4a, s4b, s4c, s4d].
  const __m512 s4 = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88),
                                  _mm512_shuffle_f32x4(ab, cd, 0xDD));
  // Lane j of each quarter + lane j + 2 (movehl), then lane 0 + lane 1
  // (movehdup).
  const __m512 s2 = _mm512_add_ps(s4, _mm512_permute_ps(s4, 0x4E));
  return _mm512_add_ps(s2, _mm512_permute_ps(s2, 0xB1));
}

// ReduceAdd of sixteen vectors at once, each with ReduceAdd's own additions
// in its order (so the same bits): the same first two steps as ReduceAdd4,
// then lanes j and j + 2, then 0 and 1, of two inputs per 128-bit quarter;
// 45 operations where four ReduceAdd4 take 52 and leave their sums spread
// over four vectors. Quarter q (lanes 4q .. 4q + 3) of the result holds the
// sums of v[q], v[q + 4], v[q + 8] and v[q + 12], in that order.
inline __m512 ReduceAdd16(const __m512 (&v)[16]) {
  __m512 t[8], u[4];
  OCTET_UNROLL for (int i = 0; i < 8; ++i) {  // 256-bit halves
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  }
  // 128-bit halves: quarter j of u[i] holds v[4 * i + j]'s four sums.
  OCTET_UNROLL for (int i = 0; i < 4; ++i) {
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
  }
  const __m512 w0 = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x44),
                                  _mm512_shuffle_ps(u[0], u[1], 0xEE));
  const __m512 w1 = _mm512_add_ps(_mm512_shuffle_ps(u[2], u[3], 0x44),
                                  _mm512_shuffle_ps(u[2], u[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(w0, w1, 0x88),
                       _mm512_shuffle_ps(w0, w1, 0xDD));
}

// The last chunk's sums of a tile of 4 weight rows (columns) stored four
// outputs of a row at a time: ReduceAdd16 of four rows' accumulators, a
// row's four sums in one quarter; ReduceAdd4 for the rows left over.
template <int MB>
inline void StoreSums4(__m512 (&acc)[4][MB], float* c, int64_t ldc) {
  OCTET_UNROLL for (int m0 = 0; m0 + 4 <= MB; m0 += 4) {
    __m512 v[16];
    OCTET_UNROLL for (int r = 0; r < 4; ++r) {
      OCTET_UNROLL for (int q = 0; q < 4; ++q) v[4 * r + q] = acc[r][m0 + q];
    }
    const __m512 s = ReduceAdd16(v);
    _mm_storeu_ps(c + m0 * ldc, _mm512_castps512_ps128(s));
    _mm_storeu_ps(c + (m0 + 1) * ldc, _mm512_extractf32x4_ps(s, 1));
    _mm_storeu_ps(c + (m0 + 2) * ldc, _mm512_extractf32x4_ps(s, 2));
    _mm_storeu_ps(c + (m0 + 3) * ldc, _mm512_extractf32x4_ps(s, 3));
  }
  OCTET_UNROLL for (int m = MB / 4 * 4; m < MB; ++m) {
    const __m512 s = ReduceAdd4(acc[0][m], acc[1][m], acc[2][m], acc[3][m]);
    const __m512i lanes =
        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm_storeu_ps(c + m * ldc,
                  _mm512_castps512_ps128(_mm512_permutexvar_ps(lanes, s)));
  }
}

// As StoreSums4 for 2 weight rows and 8 activation rows: quarter q holds
// row q's two sums, then row q + 4's.
inline void StoreSums2x8(__m512 (&acc)[2][8], float* c, int64_t ldc) {
  __m512 v[16];
  OCTET_UNROLL for (int q = 0; q < 4; ++q) {
    v[q] = acc[0][q];
    v[q + 4] = acc[1][q];
    v[q + 8] = acc[0][q + 4];
    v[q + 12] = acc[1][q + 4];
  }
  const __m512 s = ReduceAdd16(v);
  // The quarters' indices are immediates, so not a loop's (unrolled only
  // when optimizing: the -O1 sanitizer builds would not compile it).
  const __m128 x[4] = {_mm512_castps512_ps128(s), _mm512_extractf32x4_ps(s, 1),
                       _mm512_extractf32x4_ps(s, 2),
                       _mm512_extractf32x4_ps(s, 3)};
  OCTET_UNROLL for (int q = 0; q < 4; ++q) {
    _mm_storel_pi(reinterpret_cast<__m64*>(c + q * ldc), x[q]);
    _mm_storeh_pi(reinterpret_cast<__m64*>(c + (q + 4) * ldc), x[q]);
  }
}

// A tile's accumulators at the start of a K chunk: zero, or where the last
// chunk left them.
template <int NB, int MB>
inline void LoadPartial(const PartialSums& ps, __m512 (&acc)[NB][MB]) {
  OCTET_UNROLL for (int r = 0; r < NB; ++r) {
    OCTET_UNROLL for (int m = 0; m < MB; ++m) {
      acc[r][m] = ps.first ? _mm512_setzero_ps()
                           : _mm512_loadu_ps(ps.partial + r * ps.ld + m * 16);
    }
  }
}

// And at its end: kept for the next chunk, or, after the last, each reduced
// to its output c[m * ldc + r].
template <int NB, int MB>
inline void StorePartial(const PartialSums& ps, __m512 (&acc)[NB][MB], float* c,
                         int64_t ldc) {
  if constexpr (NB == 4 && MB >= 4) {
    if (ps.last) {
      StoreSums4<MB>(acc, c, ldc);
      return;
    }
  } else if constexpr (NB == 2 && MB == 8) {
    if (ps.last) {
      StoreSums2x8(acc, c, ldc);
      return;
    }
  } else if constexpr (NB * MB % 4 == 0) {
    if (ps.last) {  // four accumulators' sums at a time
      OCTET_UNROLL for (int i = 0; i < NB * MB; i += 4) {
        alignas(64) float sums[16];
        _mm512_store_ps(
            sums, ReduceAdd4(acc[i / MB][i % MB], acc[(i + 1) / MB][(i + 1) % MB],
                             acc[(i + 2) / MB][(i + 2) % MB],
                             acc[(i + 3) / MB][(i + 3) % MB]));
        OCTET_UNROLL for (int j = 0; j < 4; ++j) {
          c[((i + j) % MB) * ldc + (i + j) / MB] = sums[4 * j];
        }
      }
      return;
    }
  }
  OCTET_UNROLL for (int r = 0; r < NB; ++r) {
    OCTET_UNROLL for (int m = 0; m < MB; ++m) {
      if (ps.last) {
        c[m * ldc + r] = ReduceAdd(acc[r][m]);
      } else {
        _mm512_storeu_ps(ps.partial + r * ps.ld + m * 16, acc[r][m]);
      }
    }
  }
}

// Where a streaming e4m3 tile also writes the weight rows it decodes, as
// DecodeRows writes them (gemm_kernels.h, e4m3_rows_converting): K block
// j's row col at out + j * block + (col - col0) * ld elements.
struct ConvertedRows {
  Bf16* out;
  int64_t ld, block, col0;
};

// Streaming e4m3 tile: decodes NB weight rows 64 codes at a time and takes
// dot products with MB prepared (decoder-ordered bf16) activation rows,
// over K elements [k0, k1) (ChunkedRowsDriver, rows_tiling.h).
template <int NB, int MB>
struct E4m3Tile {
  // acc += the products of K elements [k0, k1) of weight rows [col, col +
  // NB) with the MB activation rows at a. With kStore, each decoded weight
  // row r is also written to out + r * out_ld, as DecodeRows writes it.
  template <bool kStore = false>
  static void Accumulate(const E4m3Decoder& dec, const Bf16* a, int64_t lda,
                         const uint8_t* b, int64_t ldb, int64_t k, int64_t k0,
                         int64_t k1, int64_t col, __m512 (&acc)[NB][MB],
                         Bf16* out = nullptr, int64_t out_ld = 0) {
    for (int64_t i = k0; i < k1; i += 64) {
      const __mmask64 mask = Mask64(k - i);
      __m512i w0[NB], w1[NB];
      OCTET_UNROLL for (int r = 0; r < NB; ++r) {
        // The next tile's rows start new pages, where the hardware
        // prefetcher restarts cold: fetch them one tile ahead, into L1 (for
        // this kernel measured better than into L2; NTA halves throughput).
        // When the next tile is larger than a third of L1 (long rows: K >
        // 4096 codes), lines fetched into L1 that early would evict each
        // other and the activations before use: fetch those into L2.
        const char* next =
            reinterpret_cast<const char*>(b + (col + NB + r) * ldb + i);
        if (NB * ldb <= kL1PrefetchTileBytes) {
          _mm_prefetch(next, _MM_HINT_T0);
        } else {
          _mm_prefetch(next, _MM_HINT_T1);
        }
        dec.Decode(_mm512_maskz_loadu_epi8(mask, b + (col + r) * ldb + i),
                   w0[r], w1[r]);
        if constexpr (kStore) {
          _mm512_storeu_si512(out + r * out_ld + i, w0[r]);
          _mm512_storeu_si512(out + r * out_ld + i + 32, w1[r]);
        }
      }
      // And the tile after that into the outer caches (T2): one prefetch
      // one tile ahead is not enough in flight to keep the memory busy on
      // its own (2 cores, M = 1: bench_gemm FP8 vs BF16 1.5-1.7x before,
      // 1.75-2.2x after; BF16's tile did not gain from the same change).
      OCTET_UNROLL for (int r = 0; r < NB; ++r) {
        _mm_prefetch(
            reinterpret_cast<const char*>(b + (col + 2 * NB + r) * ldb + i),
            _MM_HINT_T2);
      }
      OCTET_UNROLL for (int m = 0; m < MB; ++m) {
        __m512i x0 = _mm512_loadu_si512(a + m * lda + i);
        __m512i x1 = _mm512_loadu_si512(a + m * lda + i + 32);
        // Loaded once, kept in registers: otherwise GCC 12 reloads them for
        // each weight row where the decoded rows are also stored (kStore:
        // 31 loads a step where 16 do).
        asm("" : "+v"(x0), "+v"(x1));
        OCTET_UNROLL for (int r = 0; r < NB; ++r) {
          acc[r][m] = _mm512_dpbf16_ps(acc[r][m], AsBh(x0), AsBh(w0[r]));
          acc[r][m] = _mm512_dpbf16_ps(acc[r][m], AsBh(x1), AsBh(w1[r]));
        }
      }
    }
  }

  // Not inlined (nor RunBlocksOf, nor Bf16Tile::Run): inlined into
  // SumTileBlocks (rows_tiling.h), GCC 12 kept the accumulators in memory,
  // storing every one of them on every step (BF16 at M = 8 with 8 K blocks
  // 1.3x slower).
  [[gnu::noinline]] static void Run(const void* a_ptr, int64_t lda,
                                    const uint8_t* b, int64_t ldb, int64_t k,
                                    int64_t k0, int64_t k1, int64_t col,
                                    int64_t row0, float* c, int64_t ldc,
                                    const PartialSums& ps) {
    const E4m3Decoder dec;
    __m512 acc[NB][MB];
    LoadPartial<NB, MB>(ps, acc);
    Accumulate(dec, static_cast<const Bf16*>(a_ptr) + row0 * lda, lda, b, ldb,
               k, k0, k1, col, acc);
    StorePartial<NB, MB>(ps, acc, c, ldc);
  }

  // Run over the whole K of every block (rows_tiling.h's KBlocks) in turn,
  // each exactly as Run would compute it, with one decoder set up for all:
  // narrow blocks (24 codes in SmolLM2's o_proj) are short runs, where the
  // set-up and the calls are much of the work. With `converted`, each
  // weight row decoded is also written there.
  static void RunBlocks(const void* a_ptr, int64_t lda, const uint8_t* b,
                        int64_t ldb, int64_t k, int64_t col, int64_t row0,
                        float* c, int64_t ldc, const KBlocks& blocks,
                        const ConvertedRows* converted = nullptr) {
    if (converted == nullptr) {
      RunBlocksOf<false>(a_ptr, lda, b, ldb, k, col, row0, c, ldc, blocks, {});
    } else {
      RunBlocksOf<true>(a_ptr, lda, b, ldb, k, col, row0, c, ldc, blocks,
                        *converted);
    }
  }

  // RunBlocks, with or without the converted rows: two functions, for with
  // both loops in one GCC 12 kept a single register for the activations
  // and loaded each twice (bench_gemm FP8 at M = 16 up to 1.4x slower).
  template <bool kStore>
  [[gnu::noinline]] static void RunBlocksOf(const void* a_ptr, int64_t lda,
                                            const uint8_t* b, int64_t ldb,
                                            int64_t k, int64_t col,
                                            int64_t row0, float* c, int64_t ldc,
                                            const KBlocks& blocks,
                                            const ConvertedRows& converted) {
    const E4m3Decoder dec;
    const PartialSums whole{nullptr, 0, true, true};
    for (int64_t j = 0; j < blocks.count; ++j) {
      __m512 acc[NB][MB];
      LoadPartial<NB, MB>(whole, acc);
      const Bf16* a = reinterpret_cast<const Bf16*>(
                          static_cast<const char*>(a_ptr) + j * blocks.a_bytes) +
                      row0 * lda;
      Bf16* out = kStore ? converted.out + j * converted.block +
                               (col - converted.col0) * converted.ld
                         : nullptr;
      Accumulate<kStore>(dec, a, lda, b + j * blocks.b_bytes, ldb, k, 0, k, col,
                         acc, out, converted.ld);
      StorePartial<NB, MB>(whole, acc, c + j * blocks.c_floats, ldc);
    }
  }
};

// bfloat16 tile: NB weight rows (raw, any k) against MB prepared rows, over
// K elements [k0, k1) (ChunkedRowsDriver, rows_tiling.h).
template <int NB, int MB>
struct Bf16Tile {
  [[gnu::noinline]] static void Run(const void* a_ptr, int64_t lda,
                                    const Bf16* b, int64_t ldb, int64_t k,
                                    int64_t k0, int64_t k1, int64_t col,
                                    int64_t row0, float* c, int64_t ldc,
                                    const PartialSums& ps) {
    const Bf16* a = static_cast<const Bf16*>(a_ptr) + row0 * lda;
    __m512 acc[NB][MB];
    LoadPartial<NB, MB>(ps, acc);
    for (int64_t i = k0; i < k1; i += 32) {
      const __mmask32 mask = Mask32(k - i);
      __m512i w[NB];
      OCTET_UNROLL for (int r = 0; r < NB; ++r) {
        // Next tile one tile ahead, as in E4m3Tile, but into L2: for this
        // kernel measured better than into L1.
        _mm_prefetch(
            reinterpret_cast<const char*>(b + (col + NB + r) * ldb + i),
            _MM_HINT_T1);
        w[r] = _mm512_maskz_loadu_epi16(mask, b + (col + r) * ldb + i);
      }
      OCTET_UNROLL for (int m = 0; m < MB; ++m) {
        const __m512i x = _mm512_loadu_si512(a + m * lda + i);  // padded
        OCTET_UNROLL for (int r = 0; r < NB; ++r) {
          acc[r][m] = _mm512_dpbf16_ps(acc[r][m], AsBh(x), AsBh(w[r]));
        }
      }
    }
    StorePartial<NB, MB>(ps, acc, c, ldc);
  }
};

int64_t Padded(int64_t k) { return (k + kAlign - 1) / kAlign * kAlign; }

// e4m3 rows -> decoder-ordered bfloat16 rows of Padded(k), zero-padded,
// `ld` apart. Serves both activations (prepare) and weight blocks (convert).
void DecodeRows(const uint8_t* q, int64_t rows, int64_t k, int64_t ld,
                void* dst) {
  const E4m3Decoder dec;
  Bf16* out = static_cast<Bf16*>(dst);
  const int64_t kp = Padded(k);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < kp; i += 64) {
      __m512i w0, w1;
      dec.Decode(_mm512_maskz_loadu_epi8(Mask64(k - i), q + r * k + i), w0, w1);
      _mm512_storeu_si512(out + r * ld + i, w0);
      _mm512_storeu_si512(out + r * ld + i + 32, w1);
    }
  }
}

void PrepareBf16(const Bf16* a, int64_t m, int64_t k, int64_t ld, void* dst) {
  Bf16* out = static_cast<Bf16*>(dst);
  const int64_t kp = Padded(k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < kp; i += 32) {
      _mm512_storeu_si512(out + r * ld + i, _mm512_maskz_loadu_epi16(
                                                Mask32(k - i), a + r * k + i));
    }
  }
}

// The tiles' sums between K chunks, kept per thread: at least `floats`, or
// null when that much memory cannot be had (the driver then runs K whole).
// Plain malloc in a type of this unit's own: a std::vector here would emit
// weak library code compiled for AVX-512 that the linker could pick for the
// whole program (IsaUnitsDefineNoShareableCode).
struct PartialBuffer {
  float* data = nullptr;
  size_t floats = 0;
  ~PartialBuffer() { std::free(data); }
};
float* PartialScratch(size_t floats) {
  thread_local PartialBuffer buffer;
  if (buffer.floats < floats) {
    std::free(buffer.data);
    buffer.data = static_cast<float*>(std::malloc(floats * sizeof(float)));
    buffer.floats = buffer.data != nullptr ? floats : 0;
  }
  return buffer.data;
}

// ChunkedRowsDriver with Tile<NB, MB>, its partial sums in this thread's
// scratch (rows of sizeof(W) * ldb bytes).
template <int NB, int MB, template <int, int> class Tile, typename W>
void RunChunked(const void* a, int64_t lda, int64_t m, const W* b, int64_t ldb,
                int64_t k, int64_t n0, int64_t n1, float* c, int64_t ldc,
                const KBlocks& blocks) {
  const int64_t b_row_bytes = static_cast<int64_t>(sizeof(W)) * ldb;
  ChunkedRowsDriver<NB, MB, Tile>(
      a, lda, m, b, ldb, k, n0, n1, c, ldc, blocks, b_row_bytes,
      PartialScratch(ChunkedPartialFloats<NB, MB>(b_row_bytes)));
}

void E4m3Rows(const void* a, int64_t lda, int64_t m, const uint8_t* b,
              int64_t ldb, int64_t k, int64_t n0, int64_t n1, float* c,
              int64_t ldc, const KBlocks& blocks) {
  if (m > kMaxMPerTile) {  // two tiles' worth of rows: a taller tile
    RunChunked<kE4m3TallRowsPerTile, kE4m3TallMaxMPerTile, E4m3Tile>(
        a, lda, m, b, ldb, k, n0, n1, c, ldc, blocks);
    return;
  }
  RunChunked<kRowsPerTile, kMaxMPerTile, E4m3Tile>(a, lda, m, b, ldb, k, n0, n1,
                                                   c, ldc, blocks);
}

// The streaming tall tile over m <= kE4m3TallMaxMPerTile rows, writing the
// weights it decodes as DecodeRows would (gemm_kernels.h,
// e4m3_rows_converting). Its tiles run every K block in turn (RunBlocks'
// order) and take the same products in the same order as E4m3Rows and as
// PreparedRows over the written rows: the bits of a row do not depend on
// the path.
void E4m3RowsConverting(const void* a, int64_t lda, int64_t m, const uint8_t* b,
                        int64_t ldb, int64_t k, int64_t n0, int64_t n1,
                        float* c, int64_t ldc, const KBlocks& blocks,
                        void* converted, int64_t converted_ld,
                        int64_t converted_block_bytes) {
  constexpr int NB = kE4m3TallRowsPerTile, MB = kE4m3TallMaxMPerTile;
  const ConvertedRows out{static_cast<Bf16*>(converted), converted_ld,
                          converted_block_bytes / int64_t{sizeof(Bf16)}, n0};
  int64_t col = n0;
  for (; col + NB <= n1; col += NB) {
    RunTileBlocks<NB, MB, E4m3Tile>(m, a, lda, b, ldb, k, col, 0, c, ldc,
                                    blocks, &out);
  }
  for (; col < n1; ++col) {
    RunTileBlocks<1, MB, E4m3Tile>(m, a, lda, b, ldb, k, col, 0, c, ldc, blocks,
                                   &out);
  }
  if (BlocksLeftToAdd(blocks)) AddBlockSums(c, ldc, m, n0, n1, blocks);
}

void Bf16Rows(const void* a, int64_t lda, int64_t m, const Bf16* b, int64_t ldb,
              int64_t k, int64_t n0, int64_t n1, float* c, int64_t ldc,
              const KBlocks& blocks) {
  if (m <= kBf16FewMMax) {
    RunChunked<kBf16FewRowsPerTile, kBf16FewMaxMPerTile, Bf16Tile>(
        a, lda, m, b, ldb, k, n0, n1, c, ldc, blocks);
    return;
  }
  RunChunked<kBf16RowsPerTile, kBf16MaxMPerTile, Bf16Tile>(
      a, lda, m, b, ldb, k, n0, n1, c, ldc, blocks);
}

void PreparedRows(const void* a, int64_t lda, int64_t m, const void* b,
                  int64_t ldb, int64_t k, int64_t n0, int64_t n1, float* c,
                  int64_t ldc, const KBlocks& blocks) {
  Bf16Rows(a, lda, m, static_cast<const Bf16*>(b), ldb, k, n0, n1, c, ldc,
           blocks);
}

}  // namespace

const GemmKernels kGemmAvx512 = {
    .k_align = kAlign,
    .dot_bytes = 2,
    .prepare_a_e4m3 = DecodeRows,
    .prepare_a_bf16 = PrepareBf16,
    .e4m3_rows = E4m3Rows,
    .stream_max_m = 2 * kE4m3TallMaxMPerTile,
    .bf16_rows = Bf16Rows,
    .convert_b_e4m3 = DecodeRows,
    .prepared_rows = PreparedRows,
    .prepared_rows_per_tile = kBf16RowsPerTile,
    .converted_k_is_padded = true,
    .e4m3_dot_scale = 1.0f,
    .adds_k_blocks = true,
    .e4m3_rows_converting = E4m3RowsConverting,
    .converting_max_m = kE4m3TallMaxMPerTile,
    .bf16_panels = kBf16PanelsAvx512,
    .e4m3_panels = kE4m3PanelsAvx512,
};

}  // namespace octet::cpu_internal
