// bench_outer_product: a probe for the CPU GEMM's next design, measured
// side by side with today's in one run. Not a kernel of octet's: nothing
// serves with it (docs/decisions/2026-12-06-cpu-gemm-outer-product.md).
//
// Today's CPU GEMM (kernels/cpu/gemm_avx512.cc) takes dot products along K:
// each accumulator holds 16 lanes of one output's sum, reduced across its
// lanes at the end, and every tile loads its weight rows and activation
// rows as whole vectors. The probe is the other way round, an outer
// product: the weights packed at load into panels of 16 * NV columns,
// [K / 2][16 * NV][2] bfloat16, so that one 64-byte load holds two K values
// of 16 columns; each activation pair is broadcast (4 bytes) and one
// vdpbf16ps adds it into 16 columns' sums at once. A tile of NV panel
// vectors x MB rows loads NV vectors and MB broadcasts per K pair and
// needs no reduction across lanes: its accumulators are the outputs.
//
// For each shape and M, two tables, each cell's GEMMs timed interleaved in
// rounds on --threads threads:
//   bfloat16: octet's GemmBf16 (the driver's preparation of A and its
//     epilogue included) against the probe's 4 x 6 and 3 x 8 tiles (A as it
//     comes; B packed before the timing, as a load would);
//   e4m3: octet's GemmE4m3 against the probe's two e4m3 forms (a 2 x 8
//     tile decoding each 64-code chunk of an e4m3 panel in registers into
//     two K pairs; each panel decoded kDecodedChunk K values at a time for
//     all rows under the 4 x 6 bfloat16 tile) and that bfloat16 tile over
//     the same weights decoded beforehand: FP8 against BF16 in the new form.
// Each prints the medians, ratios of times (median and spread of the
// rounds' ratios) and each time as a share of the vdpbf16ps peak measured
// in the same run (before and after the cells; the higher of the two).
// Before timing, sampled outputs are checked against a binary64 reference
// within the binary32 summation bound, the probe's e4m3 forms and
// bfloat16 tile against each other (the same products in the same order:
// the same bits), and its first row computed alone against the batch's; a
// miss stops the run.
//
//   bench_outer_product [--shapes=6144x4096,...] [--m=128,512] [--rounds=5]
//                       [--min_time_ms=100] [--threads=0]
//
// Exits 77 (nothing measured) on a CPU without AVX-512 BW, VBMI and BF16.
#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/bf16.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/fp8.h"
#include "tests/bench/membw.h"

ABSL_FLAG(std::string, shapes, "6144x4096,4096x4096,28672x4096,4096x14336",
          "weight shapes OUTxIN (N x K), comma-separated; N a multiple of 16, "
          "K a multiple of 4");
ABSL_FLAG(std::string, m, "128,512", "batch sizes M, comma-separated");
ABSL_FLAG(int32_t, rounds, 5,
          "timed rounds per cell (each times every GEMM of the cell)");
ABSL_FLAG(int32_t, min_time_ms, 100,
          "each timing repeats its GEMM for at least this long");
ABSL_FLAG(int32_t, threads, 0, "threads (0 = one per core)");

namespace octet::bench {
namespace {

#define OCTET_PROBE_UNROLL _Pragma("GCC unroll 16")

// The bfloat16 weights B [n][k] packed into panels of 16 * nv columns:
// the panel at column c0 holds columns [c0, c0 + w) as [k / 2][w][2], w =
// min(16 nv, n - c0) (the last one narrower when n is not a multiple).
std::vector<Bf16> PackPanels(const std::vector<Bf16>& b, int64_t n, int64_t k,
                             int nv) {
  std::vector<Bf16> out(b.size());
  for (int64_t c0 = 0; c0 < n; c0 += 16 * nv) {
    const int64_t w = std::min<int64_t>(16 * nv, n - c0);
    Bf16* panel = out.data() + c0 * k;
    for (int64_t pair = 0; pair < k / 2; ++pair) {
      for (int64_t c = 0; c < w; ++c) {
        for (int64_t t = 0; t < 2; ++t) {
          panel[(pair * w + c) * 2 + t] = b[(c0 + c) * k + 2 * pair + t];
        }
      }
    }
  }
  return out;
}

// e4m3 weight codes Q [n][k] (k a multiple of 4) packed into panels of
// 16 * nv columns: the panel at column c0, w = min(16 nv, n - c0) columns
// wide, holds 64-byte chunks (s, v) for K [4s, 4s + 4) and columns
// [c0 + 16 v, c0 + 16 v + 16), chunk (s, v) at (s * w / 16 + v) * 64. In a
// chunk, byte 16 L + 8 h + 2 q + t is Q[c0 + 16 v + 4 L + q][4 s + 2 h + t]:
// the decoder's byte interleave within 128-bit lanes then gives K pair
// (4s, 4s + 1) of the 16 columns in one vector and (4s + 2, 4s + 3) in the
// other, the bfloat16 panel's layout.
std::vector<uint8_t> PackE4m3Panels(const std::vector<uint8_t>& q, int64_t n,
                                    int64_t k, int nv) {
  std::vector<uint8_t> out(q.size());
  for (int64_t c0 = 0; c0 < n; c0 += 16 * nv) {
    const int64_t vectors = std::min<int64_t>(16 * nv, n - c0) / 16;
    uint8_t* panel = out.data() + c0 * k;
    for (int64_t step = 0; step < k / 4; ++step) {
      for (int64_t v = 0; v < vectors; ++v) {
        uint8_t* chunk = panel + (step * vectors + v) * 64;
        for (int lane = 0; lane < 4; ++lane) {
          for (int h = 0; h < 2; ++h) {
            for (int col = 0; col < 4; ++col) {
              for (int t = 0; t < 2; ++t) {
                chunk[16 * lane + 8 * h + 2 * col + t] =
                    q[(c0 + 16 * v + 4 * lane + col) * k + 4 * step + 2 * h +
                      t];
              }
            }
          }
        }
      }
    }
  }
  return out;
}

#if defined(__x86_64__)
// The bfloat16 of each e4m3 magnitude, high and low bytes: the tables the
// decoder looks up (as kernels/cpu/gemm_avx512.cc's).
struct alignas(64) DecoderTables {
  uint8_t hi[128], lo[128];
};
constexpr DecoderTables kDecoderTables = [] {
  DecoderTables t{};
  for (int c = 0; c < 128; ++c) {
    const uint32_t bits = std::bit_cast<uint32_t>(kE4m3DecodeTable[c]);
    t.hi[c] = static_cast<uint8_t>(bits >> 24);
    t.lo[c] = static_cast<uint8_t>(bits >> 16);
  }
  return t;
}();

// c[m][16 NV] (ldc apart) = rows a[m][k] (bfloat16, lda apart) times one
// bfloat16 panel, for MB rows: NV panel loads and MB broadcasts per K pair.
// With `from_c`, the sums go on from those in c (a chunk of K after the
// first: the same additions in the same order as one run over all of K).
template <int NV, int MB>
struct Bf16PanelTile {
  static constexpr int64_t kPanelBytesPerWeight = 2;
  __attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) static void
  Run(const Bf16* a, int64_t lda, const uint8_t* panel_bytes, int64_t k,
      float* c, int64_t ldc, bool from_c = false) {
    const Bf16* panel = reinterpret_cast<const Bf16*>(panel_bytes);
    __m512 acc[MB][NV];
    OCTET_PROBE_UNROLL for (int m = 0; m < MB; ++m) {
      OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
        acc[m][v] = from_c ? _mm512_loadu_ps(c + m * ldc + 16 * v)
                           : _mm512_setzero_ps();
      }
    }
    for (int64_t pair = 0; pair < k / 2; ++pair) {
      __m512i w[NV];
      OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
        w[v] = _mm512_loadu_si512(panel + (pair * NV + v) * 32);
      }
      OCTET_PROBE_UNROLL for (int m = 0; m < MB; ++m) {
        int32_t bits;
        std::memcpy(&bits, a + m * lda + 2 * pair, sizeof(bits));
        const __m512bh x = (__m512bh)_mm512_set1_epi32(bits);
        OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x, (__m512bh)w[v]);
        }
      }
    }
    OCTET_PROBE_UNROLL for (int m = 0; m < MB; ++m) {
      OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
        _mm512_storeu_ps(c + m * ldc + 16 * v, acc[m][v]);
      }
    }
  }
};

// 64 codes of an e4m3 panel chunk -> its two K pairs of 16 columns in
// bfloat16: two table lookups, the sign OR-ed in, two byte interleaves.
struct PanelDecoder {
  __m512i hi0, hi1, lo0, lo1, sign;
  __attribute__((target("avx512f,avx512bw,avx512vbmi"))) PanelDecoder()
      : hi0(_mm512_load_si512(kDecoderTables.hi)),
        hi1(_mm512_load_si512(kDecoderTables.hi + 64)),
        lo0(_mm512_load_si512(kDecoderTables.lo)),
        lo1(_mm512_load_si512(kDecoderTables.lo + 64)),
        sign(_mm512_set1_epi8(static_cast<char>(0x80))) {}
  __attribute__((target("avx512f,avx512bw,avx512vbmi"))) void Decode(
      const uint8_t* chunk, __m512i& w0, __m512i& w1) const {
    const __m512i codes = _mm512_loadu_si512(chunk);
    __m512i hi = _mm512_permutex2var_epi8(hi0, codes, hi1);
    const __m512i lo = _mm512_permutex2var_epi8(lo0, codes, lo1);
    hi = _mm512_ternarylogic_epi32(hi, codes, sign, 0xF8);
    w0 = _mm512_unpacklo_epi8(lo, hi);
    w1 = _mm512_unpackhi_epi8(lo, hi);
  }
};

// As Bf16PanelTile over an e4m3 panel (PackE4m3Panels), each 64-code chunk
// decoded in registers (PanelDecoder) into two K pairs: the same products
// in the same order as Bf16PanelTile over the decoded panel.
template <int NV, int MB>
struct E4m3PanelTile {
  static constexpr int64_t kPanelBytesPerWeight = 1;
  __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512bf16"),
                 noinline)) static void
  Run(const Bf16* a, int64_t lda, const uint8_t* panel, int64_t k, float* c,
      int64_t ldc) {
    const PanelDecoder dec;
    __m512 acc[MB][NV];
    OCTET_PROBE_UNROLL for (int m = 0; m < MB; ++m) {
      OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
        acc[m][v] = _mm512_setzero_ps();
      }
    }
    for (int64_t step = 0; step < k / 4; ++step) {
      __m512i w0[NV], w1[NV];
      OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
        dec.Decode(panel + (step * NV + v) * 64, w0[v], w1[v]);
      }
      OCTET_PROBE_UNROLL for (int m = 0; m < MB; ++m) {
        int32_t bits[2];
        std::memcpy(bits, a + m * lda + 4 * step, sizeof(bits));
        const __m512bh x0 = (__m512bh)_mm512_set1_epi32(bits[0]);
        const __m512bh x1 = (__m512bh)_mm512_set1_epi32(bits[1]);
        OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x0, (__m512bh)w0[v]);
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], x1, (__m512bh)w1[v]);
        }
      }
    }
    OCTET_PROBE_UNROLL for (int m = 0; m < MB; ++m) {
      OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
        _mm512_storeu_ps(c + m * ldc + 16 * v, acc[m][v]);
      }
    }
  }
};

// Tile<NV, rows> for the last rows < MB of a panel; `extra`: Run's further
// arguments (Bf16PanelTile's from_c).
template <template <int, int> class Tile, int NV, int MB, typename... Extra>
void RowTile(int64_t rows, const Bf16* a, int64_t lda, const uint8_t* panel,
             int64_t k, float* c, int64_t ldc, Extra... extra) {
  if constexpr (MB > 1) {
    if (rows < MB) {
      RowTile<Tile, NV, MB - 1>(rows, a, lda, panel, k, c, ldc, extra...);
      return;
    }
  }
  Tile<NV, MB>::Run(a, lda, panel, k, c, ldc, extra...);
}

// Every row group of one panel of `vectors` (<= NV) vectors of columns.
template <template <int, int> class Tile, int NV, int MB>
void PanelRows(int vectors, const Bf16* a, int64_t m, int64_t k,
               const uint8_t* panel, float* y, int64_t n) {
  if constexpr (NV > 1) {
    if (vectors < NV) {
      PanelRows<Tile, NV - 1, MB>(vectors, a, m, k, panel, y, n);
      return;
    }
  }
  for (int64_t row = 0; row < m; row += MB) {
    RowTile<Tile, NV, MB>(std::min<int64_t>(MB, m - row), a + row * k, k, panel,
                          k, y + row * n, n);
  }
}

// Y [m][n] = A [m][k] B^T over the packed panels, threads splitting the
// panels; each panel (16 nv columns x k: L2-sized) serves every row group.
template <template <int, int> class Tile, int NV, int MB>
void ProbeGemm(const Bf16* a, int64_t m, int64_t k, const void* panels,
               int64_t n, float* y, int threads) {
  const int64_t cols = 16 * NV;
  const auto* bytes = static_cast<const uint8_t*>(panels);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t p = 0; p < (n + cols - 1) / cols; ++p) {
    const int64_t c0 = p * cols;
    PanelRows<Tile, NV, MB>(
        static_cast<int>(std::min(cols, n - c0) / 16), a, m, k,
        bytes + c0 * k * Tile<NV, MB>::kPanelBytesPerWeight, y + c0, n);
  }
}

// K values of an e4m3 panel decoded once per chunk for all rows: the probe's
// answer to decoding per tile. 512 K values of 64 columns are 64 KiB of
// bfloat16, in L2 beside the panel; chunks of 128 (16 KiB, L1) ran the
// 4 x 6 tile over them at 0.86-0.88x of its speed over weights decoded
// beforehand (M >= 128), chunks of 512 and 1024 at 0.92-0.95x.
constexpr int64_t kDecodedChunk = 512;

// Steps [s0, s0 + steps) (4 K values each) of an e4m3 panel of `vectors`
// vectors, decoded into the bfloat16 panel layout ([2 * steps][16 vectors]
// [2]) at out.
__attribute__((target("avx512f,avx512bw,avx512vbmi"), noinline)) void
DecodePanelSteps(const uint8_t* panel, int vectors, int64_t s0, int64_t steps,
                 Bf16* out) {
  const PanelDecoder dec;
  for (int64_t s = 0; s < steps; ++s) {
    for (int v = 0; v < vectors; ++v) {
      __m512i w0, w1;
      dec.Decode(panel + ((s0 + s) * vectors + v) * 64, w0, w1);
      _mm512_storeu_si512(out + ((2 * s) * vectors + v) * 32, w0);
      _mm512_storeu_si512(out + ((2 * s + 1) * vectors + v) * 32, w1);
    }
  }
}

// One e4m3 panel of `vectors` (<= NV) vectors, chunk by chunk of K: the
// chunk decoded once into `decoded`, then every row group's bfloat16 tile
// over it, going on from the last chunk's sums in y.
template <int NV, int MB>
void DecodedPanelRows(int vectors, const Bf16* a, int64_t m, int64_t k,
                      const uint8_t* panel, float* y, int64_t n,
                      Bf16* decoded) {
  if constexpr (NV > 1) {
    if (vectors < NV) {
      DecodedPanelRows<NV - 1, MB>(vectors, a, m, k, panel, y, n, decoded);
      return;
    }
  }
  for (int64_t k0 = 0; k0 < k; k0 += kDecodedChunk) {
    const int64_t kc = std::min(kDecodedChunk, k - k0);
    DecodePanelSteps(panel, NV, k0 / 4, kc / 4, decoded);
    for (int64_t row = 0; row < m; row += MB) {
      RowTile<Bf16PanelTile, NV, MB>(std::min<int64_t>(MB, m - row),
                                     a + row * k + k0, k,
                                     reinterpret_cast<const uint8_t*>(decoded),
                                     kc, y + row * n, n, k0 > 0);
    }
  }
}

// Y [m][n] = A [m][k] B^T over e4m3 panels (PackE4m3Panels, 16 NV
// columns), each decoded chunk by chunk for all rows (DecodedPanelRows).
template <int NV, int MB>
void ProbeGemmDecoded(const Bf16* a, int64_t m, int64_t k,
                      const uint8_t* panels, int64_t n, float* y, int threads) {
  const int64_t cols = 16 * NV;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t p = 0; p < (n + cols - 1) / cols; ++p) {
    alignas(64) Bf16 decoded[kDecodedChunk * 16 * NV];
    const int64_t c0 = p * cols;
    DecodedPanelRows<NV, MB>(static_cast<int>(std::min(cols, n - c0) / 16), a,
                             m, k, panels + c0 * k, y + c0, n, decoded);
  }
}
#endif

std::vector<Bf16> RandomBf16(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<Bf16> out(count);
  for (Bf16& v : out) v = FloatToBf16(dist(rng));
  return out;
}

// Random e4m3 codes, NaN (0x7F, 0xFF) left out.
std::vector<uint8_t> RandomCodes(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(count);
  for (uint8_t& c : out) {
    do {
      c = static_cast<uint8_t>(rng());
    } while ((c & 0x7F) == 0x7F);
  }
  return out;
}

// e4m3 codes as bfloat16 values (exact: e4m3 has 3 mantissa bits).
std::vector<Bf16> DecodeToBf16(const std::vector<uint8_t>& codes) {
  std::vector<Bf16> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    out[i] = FloatToBf16(kE4m3DecodeTable[codes[i]]);
  }
  return out;
}

// Whether y's sampled outputs are within the binary32 summation bound of
// a binary64 reference: |y - sum| <= gamma_k * sum |a_i b_i|, gamma_k =
// k u / (1 - k u), u = 2^-24 (each product of two bfloat16 is exact).
// a(i) and b(i) are element i of A [m][k] and B [n][k].
template <typename GetA, typename GetB>
bool CloseToReference(GetA a, GetB b, int64_t m, int64_t n, int64_t k,
                      const std::vector<float>& y, const char* what) {
  const double u = std::ldexp(1.0, -24), gamma = k * u / (1 - k * u);
  for (int64_t s = 0; s < 64; ++s) {
    const int64_t row = (s * 7919) % m, col = (s * 104729) % n;
    double sum = 0, abs_sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double p = a(row * k + i) * b(col * k + i);
      sum += p;
      abs_sum += std::fabs(p);
    }
    const double got = y[row * n + col];
    if (!(std::fabs(got - sum) <= gamma * abs_sum)) {
      absl::FPrintF(stderr,
                    "bench_outer_product: %s output (%d, %d) = %.9g, binary64 "
                    "%.9g, beyond the bound %.3g\n",
                    what, row, col, got, sum, gamma * abs_sum);
      return false;
    }
  }
  return true;
}

// Whether x and y hold the same bits; says where they differ.
bool SameBits(const std::vector<float>& x, const std::vector<float>& y,
              int64_t count, const char* what) {
  for (int64_t i = 0; i < count; ++i) {
    if (std::bit_cast<uint32_t>(x[i]) != std::bit_cast<uint32_t>(y[i])) {
      absl::FPrintF(stderr,
                    "bench_outer_product: %s: element %d differs (%.9g, "
                    "%.9g)\n",
                    what, i, x[i], y[i]);
      return false;
    }
  }
  return true;
}

// Seconds per call of f, repeated for at least min_ms.
double TimeOne(const std::function<void()>& f, int min_ms) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int64_t calls = 0;
  double elapsed = 0;
  do {
    f();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed * 1e3 < min_ms);
  return elapsed / calls;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
}

struct Shape {
  int64_t n, k;
};

bool ParseShapes(const std::string& text, std::vector<Shape>* out) {
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> nk = absl::StrSplit(item, 'x');
    Shape s;
    if (nk.size() != 2 || !absl::SimpleAtoi(nk[0], &s.n) ||
        !absl::SimpleAtoi(nk[1], &s.k) || s.n <= 0 || s.k <= 0 ||
        s.n % 16 != 0 || s.k % 4 != 0) {
      absl::FPrintF(stderr,
                    "bench_outer_product: --shapes: '%s' is not NxK with N a "
                    "positive multiple of 16 and K of 4\n",
                    item);
      return false;
    }
    out->push_back(s);
  }
  return true;
}

bool ParseMs(const std::string& text, std::vector<int64_t>* out) {
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t m;
    if (!absl::SimpleAtoi(item, &m) || m <= 0) {
      absl::FPrintF(stderr, "bench_outer_product: --m: '%s' is not a count\n",
                    item);
      return false;
    }
    out->push_back(m);
  }
  return true;
}

// The exit status where this CPU cannot run the probe (ctest's
// SKIP_RETURN_CODE: the run counts as skipped, not passed).
constexpr int kNothingToMeasure = 77;

// One shape and M: the seconds per call of each GEMM, round by round.
struct Cell {
  int64_t m = 0, n = 0, k = 0;
  std::vector<std::vector<double>> t;
};

// The vdpbf16ps peak in FLOP/s.
double DotPeak(int threads) {
  return CpuDotPeakTflops(DotInstruction::kAvx512Bf16, threads, 3) * 1e12;
}

// Times the runs of one cell, interleaved in rounds.
Cell TimeCell(int64_t m, const Shape& s,
              const std::vector<std::function<void()>>& runs, int rounds,
              int min_ms) {
  Cell cell;
  cell.m = m, cell.n = s.n, cell.k = s.k;
  cell.t.resize(runs.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < runs.size(); ++i) {
      cell.t[i].push_back(TimeOne(runs[i], min_ms));
    }
  }
  return cell;
}

// A time ratio of a table: t[over] / t[under].
struct Ratio {
  int over, under;
};

// One table: per cell each GEMM's median (names[i]: t[i]), the ratios
// (median, min-max of the rounds' ratios), and each time as a share of
// the peak.
void PrintCells(const std::vector<Cell>& cells,
                const std::vector<const char*>& names,
                const std::vector<Ratio>& ratios, double peak) {
  absl::PrintF("%6s %6s %6s", "M", "N", "K");
  for (const char* name : names)
    absl::PrintF(" %10s", absl::StrCat(name, "_ms"));
  for (const Ratio& q : ratios) {
    absl::PrintF(" %20s", absl::StrCat(names[q.over], "/", names[q.under]));
  }
  for (const char* name : names)
    absl::PrintF(" %9s", absl::StrCat("%pk_", name));
  absl::PrintF("\n");
  for (const Cell& c : cells) {
    const double flops = 2.0 * c.m * c.n * c.k;
    absl::PrintF("%6d %6d %6d", c.m, c.n, c.k);
    for (const auto& t : c.t) absl::PrintF(" %10.3f", Median(t) * 1e3);
    for (const Ratio& q : ratios) {
      std::vector<double> x;
      for (size_t r = 0; r < c.t[0].size(); ++r) {
        x.push_back(c.t[q.over][r] / c.t[q.under][r]);
      }
      absl::PrintF(" %20s",
                   absl::StrFormat("%.2fx (%.2f-%.2f)", Median(x),
                                   *std::min_element(x.begin(), x.end()),
                                   *std::max_element(x.begin(), x.end())));
    }
    for (const auto& t : c.t) {
      absl::PrintF(" %8.1f%%", 100 * flops / Median(t) / peak);
    }
    absl::PrintF("\n");
  }
}

// Runs each of a cell's GEMMs once, for the checks; false (said) where
// octet's returned an error in `octet`.
bool RunEach(const std::vector<std::function<void()>>& runs,
             const absl::Status& octet) {
  for (const auto& run : runs) run();
  if (!octet.ok()) {
    absl::FPrintF(stderr, "bench_outer_product: %s\n", octet.ToString());
    return false;
  }
  return true;
}

// The bfloat16 cell: octet's GemmBf16 and the probe's 4 x 6 and 3 x 8
// tiles, checked against binary64, then timed. False: a check failed.
bool Bf16Cell(int64_t m, const Shape& s, const CpuKernelOptions& options,
              int rounds, int min_ms, std::vector<Cell>* cells) {
  const int threads = options.num_threads;
  const std::vector<Bf16> a = RandomBf16(m * s.k, 1 + m);
  const std::vector<Bf16> b = RandomBf16(s.n * s.k, 2 + s.n);
  const std::vector<Bf16> p4 = PackPanels(b, s.n, s.k, 4);
  const std::vector<Bf16> p3 = PackPanels(b, s.n, s.k, 3);
  std::vector<float> y_oct(m * s.n), y4(m * s.n), y3(m * s.n);
  absl::Status status;
  const std::vector<std::function<void()>> runs = {
      [&] {
        status = GemmBf16(a.data(), b.data(), m, s.n, s.k, y_oct.data(),
                          DType::kF32, options);
      },
      [&] {
        ProbeGemm<Bf16PanelTile, 4, 6>(a.data(), m, s.k, p4.data(), s.n,
                                       y4.data(), threads);
      },
      [&] {
        ProbeGemm<Bf16PanelTile, 3, 8>(a.data(), m, s.k, p3.data(), s.n,
                                       y3.data(), threads);
      },
  };
  if (!RunEach(runs, status)) return false;
  auto av = [&](int64_t i) { return double(Bf16ToFloat(a[i])); };
  auto bv = [&](int64_t i) { return double(Bf16ToFloat(b[i])); };
  if (!CloseToReference(av, bv, m, s.n, s.k, y_oct, "octet bf16") ||
      !CloseToReference(av, bv, m, s.n, s.k, y4, "op4x6") ||
      !CloseToReference(av, bv, m, s.n, s.k, y3, "op3x8") ||
      !SameBits(y4, y3, m * s.n, "op4x6 against op3x8")) {
    return false;
  }
  cells->push_back(TimeCell(m, s, runs, rounds, min_ms));
  return true;
}

// The e4m3 cell: octet's GemmE4m3 (scales 1); the probe's e4m3 tile (2 x 8,
// weights decoded in registers; activations as bfloat16, decoded before
// timing); its panels decoded chunk by chunk for all rows under the 4 x 6
// bfloat16 tile (ProbeGemmDecoded); and that tile over the whole weights
// decoded before timing; checked against binary64 and against each other
// (the same products in the same order: the same bits; the first row
// alone as in the batch), then timed. False: a check failed.
bool E4m3Cell(int64_t m, const Shape& s, const CpuKernelOptions& options,
              int rounds, int min_ms, std::vector<Cell>* cells) {
  const int threads = options.num_threads;
  const std::vector<uint8_t> qa = RandomCodes(m * s.k, 3 + m);
  const std::vector<uint8_t> qb = RandomCodes(s.n * s.k, 4 + s.n);
  const std::vector<Bf16> a = DecodeToBf16(qa), b = DecodeToBf16(qb);
  const std::vector<uint8_t> p8 = PackE4m3Panels(qb, s.n, s.k, 2);
  const std::vector<uint8_t> pd = PackE4m3Panels(qb, s.n, s.k, 4);
  const std::vector<Bf16> p4 = PackPanels(b, s.n, s.k, 4);
  std::vector<float> y_oct(m * s.n), y8(m * s.n), yd(m * s.n), y4(m * s.n),
      alone(s.n);
  absl::Status status;
  const std::vector<std::function<void()>> runs = {
      [&] {
        status = GemmE4m3(qa.data(), 1.0f, qb.data(), 1.0f, m, s.n, s.k,
                          y_oct.data(), DType::kF32, options);
      },
      [&] {
        ProbeGemm<E4m3PanelTile, 2, 8>(a.data(), m, s.k, p8.data(), s.n,
                                       y8.data(), threads);
      },
      [&] {
        ProbeGemmDecoded<4, 6>(a.data(), m, s.k, pd.data(), s.n, yd.data(),
                               threads);
      },
      [&] {
        ProbeGemm<Bf16PanelTile, 4, 6>(a.data(), m, s.k, p4.data(), s.n,
                                       y4.data(), threads);
      },
  };
  if (!RunEach(runs, status)) return false;
  ProbeGemm<E4m3PanelTile, 2, 8>(a.data(), 1, s.k, p8.data(), s.n, alone.data(),
                                 threads);
  auto av = [&](int64_t i) { return double(kE4m3DecodeTable[qa[i]]); };
  auto bv = [&](int64_t i) { return double(kE4m3DecodeTable[qb[i]]); };
  if (!CloseToReference(av, bv, m, s.n, s.k, y_oct, "octet e4m3") ||
      !CloseToReference(av, bv, m, s.n, s.k, y8, "op_e4m3") ||
      !SameBits(y8, y4, m * s.n, "op_e4m3 against op_bf16") ||
      !SameBits(yd, y4, m * s.n, "op_dec against op_bf16") ||
      !SameBits(y8, alone, s.n, "op_e4m3's first row alone")) {
    return false;
  }
  cells->push_back(TimeCell(m, s, runs, rounds, min_ms));
  return true;
}

int Main() {
#if !defined(__x86_64__)
  absl::FPrintF(stderr, "bench_outer_product: x86-64 only; nothing measured\n");
  return kNothingToMeasure;
#else
  const CpuFeatures& f = GetCpuFeatures();
  if (!(f.avx512f && f.avx512bw && f.avx512vbmi && f.avx512bf16)) {
    absl::FPrintF(stderr,
                  "bench_outer_product: needs AVX-512 BW, VBMI and BF16 (this "
                  "CPU: %s); nothing measured\n",
                  DescribeCpuFeatures());
    return kNothingToMeasure;
  }
  std::vector<Shape> shapes;
  std::vector<int64_t> ms;
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int min_ms = absl::GetFlag(FLAGS_min_time_ms);
  int threads = absl::GetFlag(FLAGS_threads);
  if (!ParseShapes(absl::GetFlag(FLAGS_shapes), &shapes) ||
      !ParseMs(absl::GetFlag(FLAGS_m), &ms)) {
    return 2;
  }
  if (rounds < 1 || min_ms < 0 || threads < 0) {
    absl::FPrintF(stderr,
                  "bench_outer_product: --rounds >= 1, --min_time_ms >= 0, "
                  "--threads >= 0\n");
    return 2;
  }
  CpuKernelOptions options;
  options.num_threads = threads == 0 ? omp_get_num_procs() : threads;
  const double peak_before = DotPeak(options.num_threads);
  std::vector<Cell> bf16, e4m3;
  for (const Shape& s : shapes) {
    for (int64_t m : ms) {
      if (!Bf16Cell(m, s, options, rounds, min_ms, &bf16) ||
          !E4m3Cell(m, s, options, rounds, min_ms, &e4m3)) {
        return 1;
      }
    }
  }
  // The peak again after the cells: a VM's speed drifts, and a share of a
  // peak measured in a slow moment would flatter every kernel.
  const double peak_after = DotPeak(options.num_threads);
  const double peak = std::max(peak_before, peak_after);
  absl::PrintF(
      "bench_outer_product: %d threads, vdpbf16ps peak measured before and "
      "after the cells: %.3f and %.3f TFLOP/s (shares of the higher); "
      "medians of %d interleaved rounds; a/b = a's time over b's (median, "
      "min-max of the rounds)\n",
      options.num_threads, peak_before / 1e12, peak_after / 1e12, rounds);
  absl::PrintF(
      "\nbfloat16: octet = GemmBf16 (dot products along K); op4x6, op3x8 = "
      "the probe's outer-product tiles over packed weights\n");
  PrintCells(bf16, {"octet", "op4x6", "op3x8"}, {{0, 1}, {0, 2}}, peak);
  absl::PrintF(
      "\ne4m3: octet = GemmE4m3; op_e4m3 = the probe's 2 x 8 tile, weights "
      "decoded in registers; op_dec = its 4 x 6 bfloat16 tile over each "
      "panel decoded %d K values at a time for all rows; op_bf16 = that tile "
      "over the weights decoded beforehand (op_bf16/op_x above 1: FP8 ahead "
      "of BF16)\n",
      kDecodedChunk);
  PrintCells(e4m3, {"octet", "op_e4m3", "op_dec", "op_bf16"},
             {{0, 1}, {0, 2}, {3, 1}, {3, 2}}, peak);
  return 0;
#endif
}

}  // namespace
}  // namespace octet::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the outer-product GEMM probe against octet's GemmBf16, side by side");
  absl::ParseCommandLine(argc, argv);
  return octet::bench::Main();
}
