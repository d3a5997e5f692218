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
// For each shape and M it times, interleaved in rounds, octet's GemmBf16
// (bfloat16 activations and weights, binary32 output: the driver's
// preparation of A and its epilogue included) and the probe's 4 x 6 and
// 3 x 8 tiles (A as it comes, the packing of B done before the timing, as
// a load would), all on --threads threads, and prints the medians, the
// probe's speed over octet's (median and spread of the rounds' ratios) and
// each as a share of the vdpbf16ps peak measured in the same run (before
// and after the cells; the higher of the two). Before
// timing, sampled outputs of all three are checked against a binary64
// reference within the binary32 summation bound; a miss stops the run.
//
//   bench_outer_product [--shapes=6144x4096,...] [--m=128,512] [--rounds=5]
//                       [--min_time_ms=100] [--threads=0]
//
// Exits 77 (nothing measured) on a CPU without AVX-512 BF16.
#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
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
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/bf16.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "tests/bench/membw.h"

ABSL_FLAG(std::string, shapes, "6144x4096,4096x4096,28672x4096,4096x14336",
          "weight shapes OUTxIN (N x K), comma-separated; N a multiple of 16, "
          "K a multiple of 2");
ABSL_FLAG(std::string, m, "128,512", "batch sizes M, comma-separated");
ABSL_FLAG(int32_t, rounds, 5, "timed rounds per cell (each times all three)");
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

#if defined(__x86_64__)
// c[m][16 nv] (ldc apart) = rows a[m][k] (lda apart) times one panel, for
// MB rows: NV panel loads and MB broadcasts per K pair.
template <int NV, int MB>
__attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) void Tile(
    const Bf16* a, int64_t lda, const Bf16* panel, int64_t k, float* c,
    int64_t ldc) {
  __m512 acc[MB][NV];
  OCTET_PROBE_UNROLL for (int m = 0; m < MB; ++m) {
    OCTET_PROBE_UNROLL for (int v = 0; v < NV; ++v) {
      acc[m][v] = _mm512_setzero_ps();
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

// Tile<NV, rows> for the last rows < MB of a panel.
template <int NV, int MB>
void RowTile(int64_t rows, const Bf16* a, int64_t lda, const Bf16* panel,
             int64_t k, float* c, int64_t ldc) {
  if constexpr (MB > 1) {
    if (rows < MB) {
      RowTile<NV, MB - 1>(rows, a, lda, panel, k, c, ldc);
      return;
    }
  }
  Tile<NV, MB>(a, lda, panel, k, c, ldc);
}

// Every row group of one panel of `vectors` (<= NV) vectors of columns.
template <int NV, int MB>
void PanelRows(int vectors, const Bf16* a, int64_t m, int64_t k,
               const Bf16* panel, float* y, int64_t n) {
  if constexpr (NV > 1) {
    if (vectors < NV) {
      PanelRows<NV - 1, MB>(vectors, a, m, k, panel, y, n);
      return;
    }
  }
  for (int64_t row = 0; row < m; row += MB) {
    RowTile<NV, MB>(std::min<int64_t>(MB, m - row), a + row * k, k, panel, k,
                    y + row * n, n);
  }
}

// Y [m][n] = A [m][k] B^T over the packed panels, threads splitting the
// panels; each panel (16 nv columns x k: L2-sized) serves every row group.
template <int NV, int MB>
void ProbeGemm(const Bf16* a, int64_t m, int64_t k, const Bf16* panels,
               int64_t n, float* y, int threads) {
  const int64_t cols = 16 * NV;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t p = 0; p < (n + cols - 1) / cols; ++p) {
    const int64_t c0 = p * cols;
    PanelRows<NV, MB>(static_cast<int>(std::min(cols, n - c0) / 16), a, m, k,
                      panels + c0 * k, y + c0, n);
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

// Whether y's sampled outputs are within the binary32 summation bound of
// a binary64 reference: |y - sum| <= gamma_k * sum |a_i b_i|, gamma_k =
// k u / (1 - k u), u = 2^-24 (each product of two bfloat16 is exact).
bool CloseToReference(const std::vector<Bf16>& a, const std::vector<Bf16>& b,
                      int64_t m, int64_t n, int64_t k,
                      const std::vector<float>& y, const char* what) {
  const double u = std::ldexp(1.0, -24), gamma = k * u / (1 - k * u);
  for (int64_t s = 0; s < 64; ++s) {
    const int64_t row = (s * 7919) % m, col = (s * 104729) % n;
    double sum = 0, abs_sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double p = double(Bf16ToFloat(a[row * k + i])) *
                       double(Bf16ToFloat(b[col * k + i]));
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
        s.n % 16 != 0 || s.k % 2 != 0) {
      absl::FPrintF(stderr,
                    "bench_outer_product: --shapes: '%s' is not NxK with N a "
                    "positive multiple of 16 and K a positive even number\n",
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

// One shape and M: the seconds per call of octet, op4x6 and op3x8, round
// by round.
struct Cell {
  int64_t m = 0, n = 0, k = 0;
  std::vector<double> t[3];
};

// The vdpbf16ps peak in FLOP/s.
double DotPeak(int threads) {
  return CpuDotPeakTflops(DotInstruction::kAvx512Bf16, threads, 3) * 1e12;
}

int Main() {
#if !defined(__x86_64__)
  absl::FPrintF(stderr, "bench_outer_product: x86-64 only; nothing measured\n");
  return kNothingToMeasure;
#else
  const CpuFeatures& f = GetCpuFeatures();
  if (!(f.avx512f && f.avx512bw && f.avx512bf16)) {
    absl::FPrintF(stderr,
                  "bench_outer_product: needs AVX-512 BF16 (this CPU: %s); "
                  "nothing measured\n",
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
  if (threads == 0) threads = omp_get_num_procs();
  CpuKernelOptions options;
  options.num_threads = threads;
  const double peak_before = DotPeak(threads);
  std::vector<Cell> cells;
  for (const Shape& s : shapes) {
    for (int64_t m : ms) {
      const std::vector<Bf16> a = RandomBf16(m * s.k, 1 + m);
      const std::vector<Bf16> b = RandomBf16(s.n * s.k, 2 + s.n);
      const std::vector<Bf16> p4 = PackPanels(b, s.n, s.k, 4);
      const std::vector<Bf16> p3 = PackPanels(b, s.n, s.k, 3);
      std::vector<float> y_oct(m * s.n), y4(m * s.n), y3(m * s.n);
      absl::Status octet_status;
      const std::function<void()> runs[3] = {
          [&] {
            octet_status = GemmBf16(a.data(), b.data(), m, s.n, s.k,
                                    y_oct.data(), DType::kF32, options);
          },
          [&] {
            ProbeGemm<4, 6>(a.data(), m, s.k, p4.data(), s.n, y4.data(),
                            threads);
          },
          [&] {
            ProbeGemm<3, 8>(a.data(), m, s.k, p3.data(), s.n, y3.data(),
                            threads);
          },
      };
      for (const auto& run : runs) run();
      if (!octet_status.ok()) {
        absl::FPrintF(stderr, "bench_outer_product: %s\n",
                      octet_status.ToString());
        return 1;
      }
      if (!CloseToReference(a, b, m, s.n, s.k, y_oct, "octet") ||
          !CloseToReference(a, b, m, s.n, s.k, y4, "op4x6") ||
          !CloseToReference(a, b, m, s.n, s.k, y3, "op3x8")) {
        return 1;
      }
      Cell cell;
      cell.m = m, cell.n = s.n, cell.k = s.k;
      for (int r = 0; r < rounds; ++r) {
        for (int i = 0; i < 3; ++i)
          cell.t[i].push_back(TimeOne(runs[i], min_ms));
      }
      cells.push_back(std::move(cell));
    }
  }
  // The peak again after the cells: a VM's speed drifts, and a share of a
  // peak measured in a slow moment would flatter every kernel.
  const double peak_after = DotPeak(threads);
  const double peak = std::max(peak_before, peak_after);
  absl::PrintF(
      "bench_outer_product: %d threads, vdpbf16ps peak measured before and "
      "after the cells: %.3f and %.3f TFLOP/s (shares of the higher)\n"
      "octet = GemmBf16 (dot products along K); op4x6, op3x8 = the "
      "outer-product probe's tiles over packed weights; medians of %d "
      "interleaved rounds; x = octet's time / the probe's (median, "
      "min-max)\n",
      threads, peak_before / 1e12, peak_after / 1e12, rounds);
  absl::PrintF("%6s %6s %6s %9s %9s %9s %20s %20s %7s %7s %7s\n", "M", "N", "K",
               "octet_ms", "op4x6_ms", "op3x8_ms", "x_op4x6", "x_op3x8",
               "%pk_oct", "%pk_4x6", "%pk_3x8");
  for (const Cell& c : cells) {
    const double flops = 2.0 * c.m * c.n * c.k;
    auto ratio = [&](int i) {
      std::vector<double> x;
      for (size_t r = 0; r < c.t[0].size(); ++r)
        x.push_back(c.t[0][r] / c.t[i][r]);
      return absl::StrFormat("%.2fx (%.2f-%.2f)", Median(x),
                             *std::min_element(x.begin(), x.end()),
                             *std::max_element(x.begin(), x.end()));
    };
    auto share = [&](int i) {
      return absl::StrFormat("%.1f%%", 100 * flops / Median(c.t[i]) / peak);
    };
    auto ms_of = [&](int i) {
      return absl::StrFormat("%.3f", Median(c.t[i]) * 1e3);
    };
    absl::PrintF("%6d %6d %6d %9s %9s %9s %20s %20s %7s %7s %7s\n", c.m, c.n,
                 c.k, ms_of(0), ms_of(1), ms_of(2), ratio(1), ratio(2),
                 share(0), share(1), share(2));
  }
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
