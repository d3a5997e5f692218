// The CPU GEMM driver: argument checks, activation preparation, the choice
// between streaming and converted weights (gemm_kernels.h) or the panels
// kernel over packed weights (panels.h), threading and the epilogue.
// The arithmetic itself is in the per-instruction-set kernels.
//
// Threads split the output columns (N) only, and every output is one dot
// product computed the same way whatever the split, so results do not depend
// on the thread count.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/fp8.h"
#include "kernels/gemm_args.h"
#include "kernels/tree_sum.h"

namespace octet {
namespace {

using cpu_internal::GemmKernels;
using cpu_internal::KBlocks;

// Column chunks handed to threads stay multiples of this (whole cache lines
// of binary32 sums, whole tiles).
constexpr int64_t kColumnAlign = 16;
// Weight bytes per converted block of the e4m3 large-M path (fits in L2).
constexpr int64_t kConvertedBlockBytes = int64_t{256} << 10;
// Below this many multiply-adds a GEMM runs on the calling thread.
constexpr int64_t kParallelMinWork = int64_t{1} << 18;

const GemmKernels& GemmKernelsFor(CpuIsa isa) {
#if defined(OCTET_X86)
  if (isa == CpuIsa::kAvx512) return cpu_internal::kGemmAvx512;
  if (isa == CpuIsa::kAvx2) return cpu_internal::kGemmAvx2;
#endif
  (void)isa;
  return cpu_internal::kGemmScalar;
}

// The epilogue: y[row, col] = (c[row * ldc + col - col0] * dot_scale) *
// out_scale[row] for rows [0, m) and columns [col0, col1), or with
// per-column weight scales (col_scale non-null) * (row_scale[row] *
// col_scale[col]). Each element is read before it is written, so c may be y
// itself (binary32, same layout).
void Finish(const float* c, int64_t ldc, int64_t m, int64_t col0, int64_t col1,
            float dot_scale, const float* out_scale, const float* row_scale,
            const float* col_scale, void* y, DType y_dtype, int64_t ldy) {
  for (int64_t row = 0; row < m; ++row) {
    const float* src = c + row * ldc;
    const float scale = out_scale[row];
    for (int64_t col = col0; col < col1; ++col) {
      const float s =
          col_scale == nullptr ? scale : row_scale[row] * col_scale[col];
      const float v = (src[col - col0] * dot_scale) * s;
      if (y_dtype == DType::kBf16) {
        static_cast<Bf16*>(y)[row * ldy + col] = FloatToBf16(v);
      } else {
        static_cast<float*>(y)[row * ldy + col] = v;
      }
    }
  }
}

// Scratch buffers that grow and are kept per thread and per use, so that
// steady-state calls allocate nothing. The calling thread also runs parallel
// tasks, so each use has its own slot.
enum class Scratch {
  kPreparedA,
  kPackedA,
  kSums,
  kConvertedB,
  kPackedB,
  kRowScales
};

template <Scratch kUse>
char* ThreadScratch(size_t bytes) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

// One GEMM's operands as the driver sees them: A and B both e4m3 codes or
// both bfloat16, or binary32 activations with binary32 or bfloat16 weights.
// Row r of Y is scaled by scale_a[r] * scale_b (one rounding), or by
// scale_b alone when scale_a is null (the unquantized GEMMs: 1); with
// scale_b_cols, element (r, c) by scale_a[r] * scale_b_cols[c] instead. K
// is cut into k_blocks equal blocks, each summed on its own, added by
// TreeSum. With round_a, binary32 activations are rounded to bfloat16 as
// they are prepared (GemmRoundedBf16BlockSums).
template <typename A, typename B>
struct Problem {
  const A* a;
  const B* b;
  int64_t m, n, k;
  const float* scale_a;
  float scale_b;
  void* y;
  DType y_dtype;
  int64_t k_blocks = 1;
  const float* scale_b_cols = nullptr;
  bool round_a = false;
  // B is bfloat16 or e4m3 packed into panels for k_blocks blocks
  // (panels.h): the outer-product GEMM (RunPanels).
  bool b_panels = false;
};

// binary32 activations -> the binary32 dot format of the scalar and AVX2
// kernels: rows `ld` apart, padded to `k_pad` with zeros.
void PrepareF32(const float* x, int64_t m, int64_t k, int64_t k_pad, int64_t ld,
                float* out) {
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(out + r * ld, x + r * k, k * sizeof(float));
    std::fill(out + r * ld + k, out + r * ld + k_pad, 0.0f);
  }
}

// Columns [col, col + width) of `rows` rows of the row-major [rows][ld]
// matrix src, packed into dst ([rows][width]): one K block of A or B.
template <typename T>
void CopyColumns(const T* src, int64_t ld, int64_t rows, int64_t col,
                 int64_t width, T* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * width, src + r * ld + col, width * sizeof(T));
  }
}

// binary32 activations rounded to bfloat16 (nearest even), in a bfloat16
// GEMM's dot format: bfloat16 (dot_bytes 2: natural K order on AVX-512) or
// the bfloat16 values in binary32; rows `ld` apart, padded to `k_pad` with
// zeros.
void PrepareRoundedF32(const GemmKernels& kern, const float* x, int64_t m,
                       int64_t k, int64_t k_pad, int64_t ld, void* dst) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k_pad; ++i) {
      const Bf16 v = i < k ? FloatToBf16(x[r * k + i]) : Bf16{0};
      if (kern.dot_bytes == 2) {
        static_cast<Bf16*>(dst)[r * ld + i] = v;
      } else {
        static_cast<float*>(dst)[r * ld + i] = Bf16ToFloat(v);
      }
    }
  }
}

// A[m][k] (dense) -> the kernels' dot format, dst [m][ld], each row padded
// to k_pad; binary32 A rounded to bfloat16 with round_a.
template <typename A>
void PrepareA(const GemmKernels& kern, const A* a, int64_t m, int64_t k,
              int64_t k_pad, int64_t ld, bool round_a, void* dst) {
  if constexpr (std::is_same_v<A, uint8_t>) {
    kern.prepare_a_e4m3(a, m, k, ld, dst);
  } else if constexpr (std::is_same_v<A, Bf16>) {
    kern.prepare_a_bf16(a, m, k, ld, dst);
  } else {
    static_assert(std::is_same_v<A, float>);
    if (round_a) {
      PrepareRoundedF32(kern, a, m, k, k_pad, ld, dst);
    } else {
      PrepareF32(a, m, k, k_pad, ld, static_cast<float*>(dst));
    }
  }
}

// The distance in elements between prepared rows of k_pad elements: k_pad,
// plus one cache line where that would put the rows a multiple of 4 KiB
// apart. Rows 4 KiB apart fall in the same set of an L1 whose 4 KiB way
// holds 64 sets (8-way 32 KiB, 12-way 48 KiB): the 8 activation rows and
// 3 weight rows one step of a bfloat16 tile loads (K = 4096: 8 KiB rows)
// would then take 11 lines of one 8-way set, evicting each other on every
// step. A line further apart, they spread over consecutive sets.
int64_t PreparedStride(int64_t k_pad, size_t dot_bytes) {
  constexpr int64_t kLine = 64, kWay = 4096;
  const int64_t bytes = k_pad * static_cast<int64_t>(dot_bytes);
  return bytes % kWay == 0 ? k_pad + kLine / static_cast<int64_t>(dot_bytes)
                           : k_pad;
}

// Every buffer with K in it holds the K blocks one after another, each
// prepared (padded, reordered) as if it were a whole K of its own:
// prepared A is [blocks][m][ld], converted weights [blocks][rows][ld], the
// raw sums [blocks][m][n]; a row's elements past kb_pad are never read. One
// block is the plain GEMM.
struct BlockLayout {
  BlockLayout(const GemmKernels& kern, int64_t k, int64_t m, int64_t blocks)
      : blocks(blocks),
        kb(k / blocks),
        kb_pad((kb + kern.k_align - 1) / kern.k_align * kern.k_align),
        ld(PreparedStride(kb_pad, kern.dot_bytes)),
        row_bytes(ld * static_cast<int64_t>(kern.dot_bytes)),
        a_block_bytes(m * row_bytes) {}
  int64_t blocks, kb, kb_pad, ld, row_bytes, a_block_bytes;
};

// A in the kernels' dot format, block after block, in this thread's
// scratch.
template <typename A, typename B>
char* PrepareABlocks(const GemmKernels& kern, const Problem<A, B>& p,
                     const BlockLayout& l) {
  char* a = ThreadScratch<Scratch::kPreparedA>(l.blocks * l.a_block_bytes);
  if (l.blocks == 1) {
    PrepareA(kern, p.a, p.m, p.k, l.kb_pad, l.ld, p.round_a, a);
    return a;
  }
  A* packed = reinterpret_cast<A*>(
      ThreadScratch<Scratch::kPackedA>(p.m * l.kb * sizeof(A)));
  for (int64_t j = 0; j < l.blocks; ++j) {
    CopyColumns(p.a, p.k, p.m, j * l.kb, l.kb, packed);
    PrepareA(kern, packed, p.m, l.kb, l.kb_pad, l.ld, p.round_a,
             a + j * l.a_block_bytes);
  }
  return a;
}

// The K blocks of p's raw weights as the kernels see them: block j of a
// weight row kb elements further along, its sums [m][n] further on.
template <typename A, typename B>
KBlocks RawBlocks(const Problem<A, B>& p, const BlockLayout& l) {
  return {l.blocks, l.a_block_bytes, l.kb * static_cast<int64_t>(sizeof(B)),
          p.m * p.n};
}

// And of a converted block of `rows` weight rows ([blocks][rows][ld]).
template <typename A, typename B>
KBlocks ConvertedBlocks(const Problem<A, B>& p, const BlockLayout& l,
                        int64_t rows) {
  return {l.blocks, l.a_block_bytes, rows * l.row_bytes, p.m * p.n};
}

// Weight rows per converted block: an L2-sized block of whole tiles.
int64_t ConvertedBlockRows(const GemmKernels& kern, const BlockLayout& l) {
  const int64_t tile = kern.prepared_rows_per_tile;
  return std::max<int64_t>(kColumnAlign,
                           kConvertedBlockBytes / (l.blocks * l.row_bytes)) /
         tile * tile;
}

// The K that prepared_rows runs over converted weights (gemm_kernels.h).
int64_t ConvertedK(const GemmKernels& kern, const BlockLayout& l) {
  return kern.converted_k_is_padded ? l.kb_pad : l.kb;
}

// RunConvertedE4m3 where the first rows convert each block: those rows
// (up to converting_max_m) through e4m3_rows_converting, which writes the
// block, then the rest through prepared_rows over it.
template <typename B>
void RunConvertingE4m3(const GemmKernels& kern, const Problem<uint8_t, B>& p,
                       const BlockLayout& l, const char* a, int64_t col0,
                       int64_t col1, float* sums) {
  const int64_t block = ConvertedBlockRows(kern, l);
  char* b = ThreadScratch<Scratch::kConvertedB>(block * l.blocks * l.row_bytes);
  const int64_t first = std::min<int64_t>(p.m, kern.converting_max_m);
  for (int64_t c0 = col0; c0 < col1; c0 += block) {
    const int64_t rows = std::min(block, col1 - c0);
    kern.e4m3_rows_converting(a, l.ld, first, p.b, p.k, l.kb, c0, c0 + rows,
                              sums, p.n, RawBlocks(p, l), b, l.ld,
                              rows * l.row_bytes);
    kern.prepared_rows(a + first * l.row_bytes, l.ld, p.m - first, b, l.ld,
                       ConvertedK(kern, l), 0, rows, sums + first * p.n + c0,
                       p.n, ConvertedBlocks(p, l, rows));
  }
}

// The raw sums of output columns [col0, col1) of an e4m3 GEMM with many
// rows: each weight decoded once into an L2-sized block, then the prepared
// kernel run over it. Where the level has e4m3_rows_converting, the first
// rows' streaming kernel decodes the block as it goes (its reads from
// memory overlap its dot products); otherwise a pass of its own converts
// it.
template <typename B>
void RunConvertedE4m3(const GemmKernels& kern, const Problem<uint8_t, B>& p,
                      const BlockLayout& l, const char* a, int64_t col0,
                      int64_t col1, float* sums) {
  if (kern.e4m3_rows_converting != nullptr) {
    RunConvertingE4m3(kern, p, l, a, col0, col1, sums);
    return;
  }
  const int64_t block = ConvertedBlockRows(kern, l);
  char* b = ThreadScratch<Scratch::kConvertedB>(block * l.blocks * l.row_bytes);
  uint8_t* packed = l.blocks == 1
                        ? nullptr
                        : reinterpret_cast<uint8_t*>(
                              ThreadScratch<Scratch::kPackedB>(block * l.kb));
  for (int64_t c0 = col0; c0 < col1; c0 += block) {
    const int64_t rows = std::min(block, col1 - c0);
    for (int64_t j = 0; j < l.blocks; ++j) {
      const uint8_t* src = p.b + c0 * p.k;
      if (l.blocks > 1) {
        CopyColumns(src, p.k, rows, j * l.kb, l.kb, packed);
        src = packed;
      }
      kern.convert_b_e4m3(src, rows, l.kb, l.ld, b + j * rows * l.row_bytes);
    }
    kern.prepared_rows(a, l.ld, p.m, b, l.ld, ConvertedK(kern, l), 0, rows,
                       sums + c0, p.n, ConvertedBlocks(p, l, rows));
  }
}

// The output columns cut into `threads` chunks (multiples of `align`),
// each run on its own thread: body(col0, col1, sums) writes the chunk's raw
// sums per K block into sums ([blocks][m][n]; y itself when it is binary32
// and there is one block), which are then added by TreeSum (unless the
// kernels add them, adds_blocks), scaled and rounded once (Finish).
template <typename A, typename B, typename Body>
void ForColumnChunks(const Problem<A, B>& p, int threads, int64_t align,
                     float dot_scale, bool adds_blocks, Body body) {
  float* sums = p.k_blocks == 1 && p.y_dtype == DType::kF32
                    ? static_cast<float*>(p.y)
                    : reinterpret_cast<float*>(ThreadScratch<Scratch::kSums>(
                          p.k_blocks * p.m * p.n * sizeof(float)));
  float* out_scale = reinterpret_cast<float*>(
      ThreadScratch<Scratch::kRowScales>(p.m * sizeof(float)));
  for (int64_t r = 0; r < p.m; ++r) {
    out_scale[r] = p.scale_a != nullptr ? p.scale_a[r] * p.scale_b : p.scale_b;
  }
  int64_t chunk = (p.n + threads - 1) / threads;
  chunk = (chunk + align - 1) / align * align;
  const int64_t chunks = (p.n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(threads) schedule(static) if (chunks > 1)
  for (int64_t t = 0; t < chunks; ++t) {
    const int64_t col0 = t * chunk;
    const int64_t col1 = std::min(p.n, col0 + chunk);
    body(col0, col1, sums);
    if (p.k_blocks > 1 && !adds_blocks) {
      for (int64_t row = 0; row < p.m; ++row) {
        TreeSum(sums + row * p.n + col0, p.k_blocks, p.m * p.n, col1 - col0);
      }
    }
    Finish(sums + col0, p.n, p.m, col0, col1, dot_scale, out_scale, p.scale_a,
           p.scale_b_cols, p.y, p.y_dtype, p.n);
  }
}

// The rows kernels' raw sums of output columns [col0, col1) into sums.
template <typename A, typename B>
void RunRows(const GemmKernels& kern, const Problem<A, B>& p,
             const BlockLayout& l, const char* a, int64_t col0, int64_t col1,
             float* sums) {
  const KBlocks raw_blocks = RawBlocks(p, l);
  if constexpr (std::is_same_v<A, uint8_t>) {
    if (p.m > kern.stream_max_m) {
      RunConvertedE4m3(kern, p, l, a, col0, col1, sums);
    } else {
      kern.e4m3_rows(a, l.ld, p.m, p.b, p.k, l.kb, col0, col1, sums, p.n,
                     raw_blocks);
    }
  } else if constexpr (std::is_same_v<B, Bf16>) {
    kern.bf16_rows(a, l.ld, p.m, p.b, p.k, l.kb, col0, col1, sums, p.n,
                   raw_blocks);
  } else {
    kern.prepared_rows(a, l.ld, p.m, p.b, p.k, l.kb, col0, col1, sums, p.n,
                       raw_blocks);
  }
}

// The GEMM over weights as rows on `threads` threads, each a chunk of
// output columns (ForColumnChunks).
template <typename A, typename B>
void RunKernels(const GemmKernels& kern, const Problem<A, B>& p, int threads) {
  const BlockLayout l(kern, p.k, p.m, p.k_blocks);
  const char* a = PrepareABlocks(kern, p, l);
  const float dot_scale =
      std::is_same_v<A, uint8_t> ? kern.e4m3_dot_scale : 1.0f;
  ForColumnChunks(p, threads, kColumnAlign, dot_scale, kern.adds_k_blocks,
                  [&](int64_t col0, int64_t col1, float* sums) {
                    RunRows(kern, p, l, a, col0, col1, sums);
                  });
}

// e4m3 codes' exact bfloat16 values.
constexpr struct E4m3Bf16Table {
  Bf16 value[256];
  constexpr E4m3Bf16Table() : value() {
    for (int c = 0; c < 256; ++c) value[c] = FloatToBf16(kE4m3DecodeTable[c]);
  }
} kE4m3Bf16;

// One activation as the panels kernels take it: bfloat16, binary32 rounded
// to nearest even, e4m3 decoded exactly.
template <typename A>
Bf16 PanelActivation(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return FloatToBf16(x);
  } else if constexpr (std::is_same_v<A, uint8_t>) {
    return kE4m3Bf16.value[x];
  } else {
    return x;
  }
}

// The outer-product GEMM over panels (panels.h) of bfloat16 weights (B =
// Bf16) or e4m3 codes (B = uint8_t): A as bfloat16 (PanelActivation), K
// block after block, each block's rows padded with zeros to the format's K
// step, the rows split across the threads; then the level's panels kernel
// (below AVX-512 the scalar twin) over whole panels on each thread.
template <typename A, typename B>
void RunPanels(const GemmKernels& kern, const Problem<A, B>& p, int threads) {
  constexpr int64_t kStep = sizeof(B) == 1 ? kE4m3PanelStep : kBf16PanelStep;
  const int64_t kb = p.k / p.k_blocks;
  const int64_t kb_pad = (kb + kStep - 1) / kStep * kStep;
  const int64_t ld = PreparedStride(kb_pad, sizeof(Bf16));
  Bf16* a = reinterpret_cast<Bf16*>(
      ThreadScratch<Scratch::kPreparedA>(p.k_blocks * p.m * ld * sizeof(Bf16)));
  const int64_t rows = p.k_blocks * p.m;
#pragma omp parallel for num_threads(threads) if (threads > 1 && p.m > 1)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t j = row / p.m, r = row % p.m;
    Bf16* out = a + row * ld;
    const A* in = p.a + r * p.k + j * kb;
    for (int64_t i = 0; i < kb; ++i) out[i] = PanelActivation(in[i]);
    std::fill(out + kb, out + kb_pad, Bf16{0});
  }
  const KBlocks blocks{p.k_blocks, p.m * ld * int64_t{sizeof(Bf16)}, 0,
                       p.m * p.n};
  cpu_internal::PanelsKernel<B> kernel;
  if constexpr (sizeof(B) == 1) {
    kernel = kern.e4m3_panels != nullptr
                 ? kern.e4m3_panels
                 : cpu_internal::kGemmScalar.e4m3_panels;
  } else {
    kernel = kern.bf16_panels != nullptr
                 ? kern.bf16_panels
                 : cpu_internal::kGemmScalar.bf16_panels;
  }
  ForColumnChunks(p, threads, kPanelColumns, 1.0f, false,
                  [&](int64_t col0, int64_t col1, float* sums) {
                    kernel(a, ld, p.m, p.b, p.n, kb_pad, col0, col1, sums, p.n,
                           blocks);
                  });
}

template <typename A, typename B>
absl::Status Run(const Problem<A, B>& p, const CpuKernelOptions& options,
                 const char* what) {
  absl::Status args =
      CheckGemmArgs(p.a, p.b, p.m, p.n, p.k, p.y, p.y_dtype, what);
  if (!args.ok()) return args;
  absl::StatusOr<CpuIsa> isa = cpu_internal::CheckOptions(options, what);
  if (!isa.ok()) return isa.status();
  if (p.k_blocks < 1 || p.k % p.k_blocks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": K = ", p.k, " does not split into ", p.k_blocks, " blocks"));
  }
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  if (p.k == 0) {  // an empty sum: Y = 0 (all-zero bits in f32 and bf16)
    std::memset(p.y, 0, p.m * p.n * DTypeSize(p.y_dtype));
    return absl::OkStatus();
  }
  const int threads = p.m * p.n * p.k < kParallelMinWork
                          ? 1
                          : cpu_internal::ThreadCount(options);
  // binary32 activations use the binary32 kernels: on AVX-512 machines the
  // AVX2 ones (the AVX-512 level computes in bfloat16), unless they are
  // rounded to bfloat16 (round_a).
  const CpuIsa level =
      std::is_same_v<A, float> && !p.round_a && *isa == CpuIsa::kAvx512
          ? CpuIsa::kAvx2
          : *isa;
  if constexpr (!std::is_same_v<B, float>) {
    if (p.b_panels) {
      RunPanels(GemmKernelsFor(*isa), p, threads);
      return absl::OkStatus();
    }
  }
  RunKernels(GemmKernelsFor(level), p, threads);
  return absl::OkStatus();
}

// The e4m3 GEMMs with one activation scale per row, and one weight scale
// (scale_b) or, with per_column, one per output column (col_scale_b); over
// rows or panels.
absl::Status RunScaledE4m3(const uint8_t* qa, const float* row_scale_a,
                           const uint8_t* qb, float scale_b, bool per_column,
                           const float* col_scale_b, int64_t m, int64_t n,
                           int64_t k, void* y, DType y_dtype, bool panels,
                           const CpuKernelOptions& options, const char* what) {
  if (m > 0 && row_scale_a == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null row scales"));
  }
  Problem<uint8_t, uint8_t> p{qa,          qb,      m, n,      k,
                              row_scale_a, scale_b, y, y_dtype};
  if (per_column) {
    if (n > 0 && col_scale_b == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": null column scales"));
    }
    p.scale_b_cols = col_scale_b;
  }
  p.b_panels = panels;
  return Run(p, options, what);
}

}  // namespace

absl::Status GemmE4m3(const uint8_t* qa, float scale_a, const uint8_t* qb,
                      float scale_b, int64_t m, int64_t n, int64_t k, void* y,
                      DType y_dtype, const CpuKernelOptions& options) {
  // One rounding of scale_a * scale_b, as in the per-row form.
  return Run(Problem<uint8_t, uint8_t>{qa, qb, m, n, k, nullptr,
                                       scale_a * scale_b, y, y_dtype},
             options, "GemmE4m3");
}

absl::Status GemmE4m3RowScales(const uint8_t* qa, const float* row_scale_a,
                               const uint8_t* qb, float scale_b, int64_t m,
                               int64_t n, int64_t k, void* y, DType y_dtype,
                               const CpuKernelOptions& options) {
  return RunScaledE4m3(qa, row_scale_a, qb, scale_b, false, nullptr, m, n, k, y,
                       y_dtype, false, options, "GemmE4m3RowScales");
}

absl::Status GemmE4m3ChannelScales(const uint8_t* qa, const float* row_scale_a,
                                   const uint8_t* qb, const float* col_scale_b,
                                   int64_t m, int64_t n, int64_t k, void* y,
                                   DType y_dtype,
                                   const CpuKernelOptions& options) {
  return RunScaledE4m3(qa, row_scale_a, qb, 1.0f, true, col_scale_b, m, n, k, y,
                       y_dtype, false, options, "GemmE4m3ChannelScales");
}

absl::Status GemmE4m3BlockSums(const uint8_t* qa, const uint8_t* qb, int64_t m,
                               int64_t n, int64_t k, int64_t k_blocks,
                               float* sums, const CpuKernelOptions& options) {
  return Run(Problem<uint8_t, uint8_t>{qa, qb, m, n, k, nullptr, 1.0f, sums,
                                       DType::kF32, k_blocks},
             options, "GemmE4m3BlockSums");
}

absl::Status GemmBf16(const Bf16* a, const Bf16* b, int64_t m, int64_t n,
                      int64_t k, void* y, DType y_dtype,
                      const CpuKernelOptions& options) {
  return Run(Problem<Bf16, Bf16>{a, b, m, n, k, nullptr, 1.0f, y, y_dtype},
             options, "GemmBf16");
}

absl::Status GemmRoundedBf16BlockSums(const float* a, const Bf16* b, int64_t m,
                                      int64_t n, int64_t k, int64_t k_blocks,
                                      float* y,
                                      const CpuKernelOptions& options) {
  Problem<float, Bf16> p{a,       b,    m, n,           k,
                         nullptr, 1.0f, y, DType::kF32, k_blocks};
  p.round_a = true;  // rounded as the driver prepares A: no pass of its own
  return Run(p, options,
             k_blocks == 1 ? "GemmRoundedBf16" : "GemmRoundedBf16BlockSums");
}

absl::Status GemmBf16Panels(const Bf16* a, const Bf16* panels, int64_t m,
                            int64_t n, int64_t k, void* y, DType y_dtype,
                            const CpuKernelOptions& options) {
  Problem<Bf16, Bf16> p{a, panels, m, n, k, nullptr, 1.0f, y, y_dtype};
  p.b_panels = true;
  return Run(p, options, "GemmBf16Panels");
}

absl::Status GemmRoundedBf16PanelBlockSums(const float* a, const Bf16* panels,
                                           int64_t m, int64_t n, int64_t k,
                                           int64_t k_blocks, float* y,
                                           const CpuKernelOptions& options) {
  Problem<float, Bf16> p{a,       panels, m, n,           k,
                         nullptr, 1.0f,   y, DType::kF32, k_blocks};
  p.round_a = true;
  p.b_panels = true;
  return Run(p, options, "GemmRoundedBf16PanelBlockSums");
}

absl::Status GemmE4m3PanelRowScales(const uint8_t* qa, const float* row_scale_a,
                                    const uint8_t* panels, float scale_b,
                                    int64_t m, int64_t n, int64_t k, void* y,
                                    DType y_dtype,
                                    const CpuKernelOptions& options) {
  return RunScaledE4m3(qa, row_scale_a, panels, scale_b, false, nullptr, m, n,
                       k, y, y_dtype, true, options, "GemmE4m3PanelRowScales");
}

absl::Status GemmE4m3PanelChannelScales(
    const uint8_t* qa, const float* row_scale_a, const uint8_t* panels,
    const float* col_scale_b, int64_t m, int64_t n, int64_t k, void* y,
    DType y_dtype, const CpuKernelOptions& options) {
  return RunScaledE4m3(qa, row_scale_a, panels, 1.0f, true, col_scale_b, m, n,
                       k, y, y_dtype, true, options,
                       "GemmE4m3PanelChannelScales");
}

absl::Status GemmE4m3PanelBlockSums(const uint8_t* qa, const uint8_t* panels,
                                    int64_t m, int64_t n, int64_t k,
                                    int64_t k_blocks, float* sums,
                                    const CpuKernelOptions& options) {
  Problem<uint8_t, uint8_t> p{qa,      panels, m,    n,           k,
                              nullptr, 1.0f,   sums, DType::kF32, k_blocks};
  p.b_panels = true;
  return Run(p, options, "GemmE4m3PanelBlockSums");
}

absl::Status GemmF32BlockSums(const float* a, const void* b, DType b_dtype,
                              int64_t m, int64_t n, int64_t k, int64_t k_blocks,
                              float* y, const CpuKernelOptions& options) {
  const char* what = k_blocks == 1 ? "GemmF32" : "GemmF32BlockSums";
  if (b_dtype == DType::kBf16) {
    return Run(Problem<float, Bf16>{a, static_cast<const Bf16*>(b), m, n, k,
                                    nullptr, 1.0f, y, DType::kF32, k_blocks},
               options, what);
  }
  if (b_dtype == DType::kF32) {
    return Run(Problem<float, float>{a, static_cast<const float*>(b), m, n, k,
                                     nullptr, 1.0f, y, DType::kF32, k_blocks},
               options, what);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": weights must be f32 or bf16, got ", DTypeName(b_dtype)));
}

absl::Status GemmF32(const float* a, const void* b, DType b_dtype, int64_t m,
                     int64_t n, int64_t k, float* y,
                     const CpuKernelOptions& options) {
  return GemmF32BlockSums(a, b, b_dtype, m, n, k, 1, y, options);
}

}  // namespace octet
