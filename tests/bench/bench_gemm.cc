// bench_gemm: FP8 vs BF16 GEMM on the linear-layer shapes of Mistral-7B, the
// table octet's idea started from (vLLM's first FP8 support was slower than
// BF16: activation quantization cost ~100 µs per call and small-batch FP8
// GEMMs were slow).
//
// For each weight shape (N out, K in) and batch size M it times, side by side
// in one run:
//   bf16_ms       Y = A·Bᵀ, both bfloat16 (the baseline)
//   fp8_ms        the e4m3 GEMM on activations already quantized
//   fp8_quant_ms  dynamic activation quantization (absmax, scale, codes) of
//                 the activation-dtype input, then the e4m3 GEMM
//   fp8blk_ms     with --k_blocks G: the e4m3 GEMM as octet's row-parallel
//                 layers run it (o_proj, down_proj; docs/design.md, "TP
//                 invariance"): K in G blocks summed apart, then added in
//                 TreeSum order, unscaled binary32 (GemmE4m3BlockSums on the
//                 CPU, CublasLtGemm::BlockSums on the GPU), and its time
//                 over fp8_ms: what TP-invariant sums cost
//   bf16p_ms      with --panels (CPU): the outer-product GEMMs over the
//   fp8qp_ms      same weights packed into panels (kernels/cpu/panels.h;
//   fp8p_ms       packed before the timing, as a load does): bfloat16
//                 (GemmBf16Panels), the quantization then e4m3
//                 (GemmE4m3PanelRowScales), and e4m3 over the activations
//                 quantized before the timing; bf16_ms over bf16p_ms, and
//                 bf16p_ms over fp8qp_ms and over fp8p_ms: FP8 against BF16
//                 both on panels, with and without the quantization
//   fp8rg_ms      with --row_groups G: the e4m3 GEMM with per-sequence
//                 activation scales, the M rows in min(G, M) sequences, as
//                 QKV and gate_up run in a batched step: on the GPU each way
//                 CublasLtGemm applies them (outer-vector scales in one
//                 GEMM, a binary32 product then a row-scaling pass, or
//                 CUTLASS's GEMM with the scales in its epilogue on sm_90;
//                 worker/gemm_choices.h picks one by timing them at load),
//                 on the CPU its one way; and the fastest over fp8_ms
//   rgq_us        with --row_groups G on the GPU: the dynamic quantization
//                 of those M rows with one scale per sequence as the CUDA
//                 backend runs it (CudaE4m3Quantizer::QuantizeRowGroups: a
//                 block per row where each row is its own sequence, the
//                 whole-tensor kernels for one, else a cooperative grid),
//                 and rgq3_us in the three launches the grid replaces (a
//                 memset, the absmax, the codes)
// and prints both speedups over BF16, the fp8_quant column's achieved GB/s
// (weights + input activations + output, the bytes that must move) and
// TFLOP/s (2·M·N·K), and that GB/s as a share of the memory read bandwidth
// measured at the start of the same run. On the CPU it also measures the
// peak of the kernels' dot-product instruction (vdpbf16ps with AVX-512,
// FMA with AVX2) and prints each cell's BF16 and fp8q TFLOP/s as a share of
// it: where M is large the GEMM is bound by arithmetic, not bytes.
//
// Every timed call reads a different copy of the weights, cycling through at
// least --rotate_mib, so weights stream from memory as they do when serving a
// whole model, instead of sitting in a cache that holds one layer.
//
// On the GPU a GEMM cuBLASLt cannot serve runs on octet's simple fallback
// kernel (kernels/cuda/gemm.h), which is far slower: each cell records which
// path its BF16 and FP8 GEMMs took (CublasLtGemm::LastPath after the timed
// call), the CSV in its path columns, the table as a `*` on the time with a
// footnote, so that a fallback number is never read as cuBLASLt's.
// --csv_out writes the CSV to a file in the same run as the table.
//
// The peer on the CPU is PyTorch's F.linear (BF16, oneDNN):
// tests/bench/torch_linear.py runs this benchmark and PyTorch on the same
// cells in alternating rounds and prints both, with the ratios' spread.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/bf16.h"
#include "kernels/aligned.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/options.h"
#include "kernels/cpu/panels.h"
#include "kernels/cpu/quantize.h"
#include "tests/bench/membw.h"

#if defined(OCTET_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/quantize.h"
#endif

ABSL_FLAG(std::string, shapes, "6144x4096,4096x4096,28672x4096,4096x14336",
          "weight shapes OUTxIN (N x K), comma-separated; the default is "
          "Mistral-7B's fused QKV, o_proj, fused gate_up and down_proj");
ABSL_FLAG(std::string, m, "1,2,4,8,16,32,64,128,256,512,1024,2048",
          "batch sizes M (activation rows), comma-separated");
ABSL_FLAG(std::string, backend, "auto",
          "auto (cuda when a GPU is usable, else cpu), cpu or cuda");
ABSL_FLAG(int32_t, reps, 0,
          "timed repetitions per cell; 0 = as many as fit in --min_time_ms "
          "(at least 5 on the CPU)");
ABSL_FLAG(double, min_time_ms, 300.0,
          "with --reps=0: time each cell for at least this long");
ABSL_FLAG(int64_t, cpu_max_m, 128,
          "on the CPU backend, skip rows with M above this (M=2048 on the "
          "largest shape takes about a minute a row); --cpu_max_m=2048 runs "
          "every row");
ABSL_FLAG(int32_t, threads, 0, "CPU threads; 0 = one per core");
ABSL_FLAG(std::string, cpu_isa, "auto",
          "CPU kernel level: auto, scalar, avx2 or avx512");
ABSL_FLAG(int64_t, rotate_mib, 1024,
          "rotate each dtype's weights over copies totalling at least this "
          "many MiB (0: one copy, cache-warm numbers)");
ABSL_FLAG(int32_t, k_blocks, 0,
          "also time the FP8 GEMM with K in this many blocks, as octet's "
          "row-parallel layers sum it (8 for Mistral-7B at TP = 1); 0: not");
ABSL_FLAG(int32_t, row_groups, 0,
          "with G > 0, also time the FP8 GEMM with per-sequence scales, the "
          "M rows in min(G, M) sequences (G >= M: each row its own, as in a "
          "decode), each way the backend has; 0: not");
ABSL_FLAG(bool, panels, false,
          "CPU: also time GemmBf16Panels (bf16p_ms) over the same weights "
          "packed into panels");
ABSL_FLAG(std::string, format, "table", "table or csv");
ABSL_FLAG(std::string, csv_out, "",
          "also write the rows as CSV (the --format=csv columns) to this "
          "file, in the same run");

namespace octet::bench {
namespace {

struct Shape {
  int64_t n, k;
};

// Which GEMM served a timed call: "cpu" on the CPU backend; on the GPU
// CublasLtGemm::PathName: "cublaslt" or "fallback".
constexpr char kFallbackPath[] = "fallback";

struct Row {
  int64_t m = 0, n = 0, k = 0;
  double bf16_ms = 0, fp8_ms = 0, fp8_quant_ms = 0, quant_us = 0;
  double fp8_blocks_ms = 0;  // with --k_blocks
  // With --panels.
  double bf16_panels_ms = 0, fp8_quant_panels_ms = 0, fp8_panels_ms = 0;
  // With --row_groups: each way's name, time and path.
  std::vector<std::string> rg_ways = {};
  std::vector<double> rg_ms = {};
  std::vector<std::string> rg_paths = {};
  double rg_quant_us = 0, rg_quant_split_us = 0;  // GPU only
  double bytes = 0;  // compulsory traffic of the fp8_quant call
  std::string bf16_path = {}, fp8_path = {};  // fp8's covers fp8_quant
  std::string blocks_path = {};
  bool Fallback() const {
    return bf16_path == kFallbackPath || fp8_path == kFallbackPath ||
           blocks_path == kFallbackPath ||
           std::find(rg_paths.begin(), rg_paths.end(), kFallbackPath) !=
               rg_paths.end();
  }
};

struct Config {
  std::vector<Shape> shapes;
  std::vector<int64_t> ms;
  std::string backend;
  int reps;
  double min_time_ms;
  int64_t cpu_max_m;
  int threads;
  CpuIsa cpu_isa;
  int64_t rotate_bytes;
  int64_t k_blocks;  // 0: no fp8blk column
  int64_t row_groups;  // 0: no fp8rg columns
  bool panels;         // the bf16p column (CPU)
  bool csv;
  std::string csv_out;
};

// ---------------------------------------------------------------- flags

absl::StatusOr<std::vector<int64_t>> ParseInts(const std::string& text,
                                               const char* flag, int64_t max) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1 || v > max) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": '", part, "' is not an integer in [1, ", max, "]"));
    }
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<Config> ParseFlags() {
  Config c;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',')) {
    std::vector<std::string> nk = absl::StrSplit(part, 'x');
    Shape s{};
    if (nk.size() != 2 || !absl::SimpleAtoi(nk[0], &s.n) ||
        !absl::SimpleAtoi(nk[1], &s.k) || s.n < 1 || s.k < 1 ||
        s.n > (1 << 20) || s.k > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shapes: '", part, "' is not OUTxIN with both in [1, 1048576]"));
    }
    c.shapes.push_back(s);
  }
  absl::StatusOr<std::vector<int64_t>> ms =
      ParseInts(absl::GetFlag(FLAGS_m), "m", 65536);
  if (!ms.ok()) return ms.status();
  c.ms = *ms;
  c.backend = absl::GetFlag(FLAGS_backend);
  if (c.backend != "auto" && c.backend != "cpu" && c.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: '", c.backend, "' is not auto, cpu or cuda"));
  }
  c.reps = absl::GetFlag(FLAGS_reps);
  if (c.reps < 0 || c.reps > 100000) {
    return absl::InvalidArgumentError("--reps: must be in [0, 100000]");
  }
  c.min_time_ms = absl::GetFlag(FLAGS_min_time_ms);
  if (!(c.min_time_ms > 0 && c.min_time_ms <= 600000)) {
    return absl::InvalidArgumentError("--min_time_ms: must be in (0, 600000]");
  }
  c.cpu_max_m = absl::GetFlag(FLAGS_cpu_max_m);
  if (c.cpu_max_m < 0) {
    return absl::InvalidArgumentError("--cpu_max_m: must be >= 0");
  }
  c.threads = absl::GetFlag(FLAGS_threads);
  if (c.threads < 0 || c.threads > 4096) {
    return absl::InvalidArgumentError("--threads: must be in [0, 4096]");
  }
  absl::StatusOr<CpuIsa> isa = ParseCpuIsa(absl::GetFlag(FLAGS_cpu_isa));
  if (!isa.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_isa: ", isa.status().message()));
  if (!CpuIsaSupported(*isa)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_isa: this CPU cannot run ", CpuIsaName(*isa), " (",
                     DescribeCpuFeatures(), ")"));
  }
  c.cpu_isa = *isa;
  const int64_t rotate_mib = absl::GetFlag(FLAGS_rotate_mib);
  if (rotate_mib < 0 || rotate_mib > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError("--rotate_mib: must be in [0, 1048576]");
  }
  c.rotate_bytes = rotate_mib << 20;
  c.k_blocks = absl::GetFlag(FLAGS_k_blocks);
  if (c.k_blocks < 0 || c.k_blocks > 64) {
    return absl::InvalidArgumentError("--k_blocks: must be in [0, 64]");
  }
  for (const Shape& s : c.shapes) {
    if (c.k_blocks > 0 && s.k % c.k_blocks != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--k_blocks: K = ", s.k, " of shape ", s.n, "x", s.k,
                       " does not split into ", c.k_blocks, " blocks"));
    }
  }
  c.row_groups = absl::GetFlag(FLAGS_row_groups);
  if (c.row_groups < 0 || c.row_groups > 65536) {
    return absl::InvalidArgumentError("--row_groups: must be in [0, 65536]");
  }
  c.panels = absl::GetFlag(FLAGS_panels);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "table" && format != "csv") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format: '", format, "' is not table or csv"));
  }
  c.csv = format == "csv";
  c.csv_out = absl::GetFlag(FLAGS_csv_out);
  return c;
}

// ---------------------------------------------------------------- helpers

// Cheap deterministic pseudo-random values in [-1, 1) (xorshift64*): the
// benchmark needs realistic magnitudes, not statistical quality, and must
// fill gigabytes quickly.
void FillUniform(float* x, int64_t n, float scale, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const uint64_t r = s * 0x2545F4914F6CDD1Dull;
    x[i] = scale * (static_cast<float>(r >> 40) * 0x1p-23f - 1.0f);
  }
}

// A tensor in binary32 and its bfloat16 rounding.
struct HostTensor {
  AlignedVector<float> f32;
  AlignedVector<Bf16> bf16;
};

// Weights [n][k], uniform with the 1/sqrt(k) scale of a trained layer.
HostTensor MakeWeights(const Shape& s) {
  HostTensor t{AlignedVector<float>(s.n * s.k), AlignedVector<Bf16>(s.n * s.k)};
  FillUniform(t.f32.data(), s.n * s.k, 1.0f / std::sqrt(float(s.k)),
              s.n * 31 + s.k);
  for (int64_t i = 0; i < s.n * s.k; ++i) t.bf16[i] = FloatToBf16(t.f32[i]);
  return t;
}

// Activations [m][k] in [-2, 2).
HostTensor MakeActivations(int64_t m, int64_t k) {
  HostTensor t{AlignedVector<float>(m * k), AlignedVector<Bf16>(m * k)};
  FillUniform(t.f32.data(), m * k, 2.0f, m * 7 + k);
  for (int64_t i = 0; i < m * k; ++i) t.bf16[i] = FloatToBf16(t.f32[i]);
  return t;
}

// The sequence of each of m rows cut into min(g, m) runs as even as
// possible (RowGroups in kernels/backend.h).
std::vector<int32_t> RowGroupOfRows(int64_t m, int64_t g) {
  g = std::min(g, m);
  std::vector<int32_t> group(m);
  for (int64_t r = 0; r < m; ++r) group[r] = static_cast<int32_t>(r * g / m);
  return group;
}

int64_t Copies(int64_t rotate_bytes, int64_t bytes_per_copy) {
  return std::max<int64_t>(
      1, (rotate_bytes + bytes_per_copy - 1) / bytes_per_copy);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// Times the calls side by side: each round runs every call once (call(i)
// with i counting rounds). Warm-up rounds run for at least half of
// --min_time_ms (and two rounds): freshly allocated weights can still be
// settling into huge pages for a while. Then timed rounds run until --reps
// rounds or --min_time_ms have passed (at least 5 rounds). Returns each
// call's median wall time in ms. Interleaving keeps a noisy or drifting
// machine from favouring whichever column ran in a quiet moment.
absl::StatusOr<std::vector<double>> TimeCpuMs(
    const std::vector<std::function<absl::Status(int)>>& calls,
    const Config& c) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  int round = 0;
  for (const auto warm = Clock::now();
       round < 2 || ms_since(warm) < c.min_time_ms / 2; ++round) {
    for (const auto& call : calls) {
      absl::Status s = call(round);
      if (!s.ok()) return s;
    }
  }
  std::vector<std::vector<double>> times(calls.size());
  const auto begin = Clock::now();
  for (int timed = 1;; ++timed, ++round) {
    for (size_t j = 0; j < calls.size(); ++j) {
      const auto t0 = Clock::now();
      absl::Status s = calls[j](round);
      if (!s.ok()) return s;
      times[j].push_back(ms_since(t0));
    }
    if (c.reps > 0 ? timed >= c.reps
                   : (timed >= 5 && ms_since(begin) >= c.min_time_ms) ||
                         timed >= 10000) {
      break;
    }
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(Median(t));
  return medians;
}

// ---------------------------------------------------------------- backends

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;
  virtual std::string Describe() const = 0;
  virtual absl::StatusOr<double> ReadBandwidthGBps() = 0;
  // The dot-product peak in TFLOP/s, or 0 where it is not measured.
  virtual double DotPeakTflops() { return 0; }
  // What DotPeakTflops measured, for the header.
  virtual std::string DotPeakName() const { return ""; }
  // Allocates and fills the rotated weight copies of one shape.
  virtual absl::Status PrepareShape(const Shape& s) = 0;
  virtual absl::StatusOr<Row> Measure(int64_t m) = 0;
  virtual std::string Notes() const = 0;
  virtual std::string Timing() const = 0;
  // The ways Measure times an FP8 GEMM with per-sequence scales
  // (--row_groups), in Row::rg_ms order.
  virtual std::vector<std::string> RowGroupWays() const = 0;
};

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const Config& c)
      : c_(c), options_{.isa = c.cpu_isa, .num_threads = c.threads} {}

  std::string Name() const override { return "cpu"; }
  std::vector<std::string> RowGroupWays() const override { return {"cpu"}; }
  std::string Describe() const override {
    return absl::StrCat("cpu: ", CpuIsaName(ResolveCpuIsa(c_.cpu_isa)),
                        " kernels, ", cpu_internal::ThreadCount(options_),
                        " threads (", DescribeCpuFeatures(), ")");
  }
  std::string Notes() const override {
    return "activations f32 (octet's CPU activation dtype), output f32";
  }
  std::string Timing() const override {
    return "each cell: bf16, fp8 and fp8q interleaved in rounds (warm-up, "
           "then >= 5 rounds), median wall time of each; quant_us timed "
           "alone, input in cache";
  }

  absl::StatusOr<double> ReadBandwidthGBps() override {
    return CpuReadBandwidthGBps(size_t{1} << 30,
                                cpu_internal::ThreadCount(options_), 5);
  }
  double DotPeakTflops() override {
    const CpuIsa isa = ResolveCpuIsa(c_.cpu_isa);
    if (isa == CpuIsa::kScalar) return 0;
    return CpuDotPeakTflops(isa == CpuIsa::kAvx512 ? DotInstruction::kAvx512Bf16
                                                   : DotInstruction::kAvx2Fma,
                            cpu_internal::ThreadCount(options_), 5);
  }
  std::string DotPeakName() const override {
    const CpuIsa isa = ResolveCpuIsa(c_.cpu_isa);
    return isa == CpuIsa::kAvx512 ? "vdpbf16ps (bf16 dot, f32 accumulate)"
                                  : "vfmadd231ps ymm (f32)";
  }

  absl::Status PrepareShape(const Shape& s) override {
    shape_ = s;
    const int64_t nk = s.n * s.k;
    const HostTensor w = MakeWeights(s);
    AlignedVector<uint8_t> wq(nk);
    absl::StatusOr<E4m3Scale> scale =
        QuantizeE4m3Dynamic(w.f32.data(), nk, wq.data(), options_);
    if (!scale.ok()) return scale.status();
    w_scale_ = scale->scale;
    w_bf16_.assign(Copies(c_.rotate_bytes, 2 * nk), w.bf16);
    w_fp8_.assign(Copies(c_.rotate_bytes, nk), wq);
    w_panels_.clear();
    w_fp8_panels_.clear();
    if (c_.panels) {
      AlignedVector<Bf16> packed(Bf16PanelElements(s.n, s.k, 1));
      absl::Status st =
          PackBf16Panels(w.bf16.data(), s.n, s.k, 1, packed.data());
      if (!st.ok()) return st;
      w_panels_.assign(Copies(c_.rotate_bytes, 2 * nk), packed);
      AlignedVector<uint8_t> codes(E4m3PanelBytes(s.n, s.k, 1));
      st = PackE4m3Panels(wq.data(), s.n, s.k, 1, codes.data());
      if (!st.ok()) return st;
      w_fp8_panels_.assign(Copies(c_.rotate_bytes, nk), codes);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Row> Measure(int64_t m) override {
    const int64_t n = shape_.n, k = shape_.k;
    const HostTensor xt = MakeActivations(m, k);
    const AlignedVector<float>& x = xt.f32;
    const AlignedVector<Bf16>& x16 = xt.bf16;
    AlignedVector<uint8_t> xq(m * k);
    AlignedVector<float> y(m * n);
    absl::StatusOr<E4m3Scale> xs =
        QuantizeE4m3Dynamic(x.data(), m * k, xq.data(), options_);
    if (!xs.ok()) return xs.status();

    Row row{.m = m, .n = n, .k = k};
    // Each call takes the next copy of its dtype's weights, so no call finds
    // the weights another call just read still in cache.
    size_t next_bf16 = 0, next_fp8 = 0;
    auto bf16 = [&](int) {
      return GemmBf16(x16.data(), w_bf16_[next_bf16++ % w_bf16_.size()].data(),
                      m, n, k, y.data(), DType::kF32, options_);
    };
    auto fp8 = [&](int) {
      return GemmE4m3(xq.data(), xs->scale,
                      w_fp8_[next_fp8++ % w_fp8_.size()].data(), w_scale_, m, n,
                      k, y.data(), DType::kF32, options_);
    };
    auto fp8_quant = [&](int) {
      absl::StatusOr<E4m3Scale> s =
          QuantizeE4m3Dynamic(x.data(), m * k, xq.data(), options_);
      if (!s.ok()) return s.status();
      return GemmE4m3(xq.data(), s->scale,
                      w_fp8_[next_fp8++ % w_fp8_.size()].data(), w_scale_, m, n,
                      k, y.data(), DType::kF32, options_);
    };
    AlignedVector<float> sums(c_.k_blocks > 0 ? m * n : 0);
    auto fp8_blocks = [&](int) {
      return GemmE4m3BlockSums(xq.data(),
                               w_fp8_[next_fp8++ % w_fp8_.size()].data(), m, n,
                               k, c_.k_blocks, sums.data(), options_);
    };
    // Per-sequence scales: each row its sequence's (a spread of values).
    const std::vector<int32_t> group =
        RowGroupOfRows(m, std::max<int64_t>(c_.row_groups, 1));
    std::vector<float> row_scale(m);
    for (int64_t r = 0; r < m; ++r) {
      row_scale[r] = xs->scale * (1.0f + 0.125f * float(group[r] % 8));
    }
    auto fp8_row_groups = [&](int) {
      return GemmE4m3RowScales(xq.data(), row_scale.data(),
                               w_fp8_[next_fp8++ % w_fp8_.size()].data(),
                               w_scale_, m, n, k, y.data(), DType::kF32,
                               options_);
    };
    size_t next_panels = 0;
    auto bf16_panels = [&](int) {
      return GemmBf16Panels(x16.data(),
                            w_panels_[next_panels++ % w_panels_.size()].data(),
                            m, n, k, y.data(), DType::kF32, options_);
    };
    size_t next_fp8_panels = 0;
    std::vector<float> same_scale(m);
    auto fp8_quant_panels = [&](int) {
      absl::StatusOr<E4m3Scale> s =
          QuantizeE4m3Dynamic(x.data(), m * k, xq.data(), options_);
      if (!s.ok()) return s.status();
      std::fill(same_scale.begin(), same_scale.end(), s->scale);
      return GemmE4m3PanelRowScales(
          xq.data(), same_scale.data(),
          w_fp8_panels_[next_fp8_panels++ % w_fp8_panels_.size()].data(),
          w_scale_, m, n, k, y.data(), DType::kF32, options_);
    };
    const std::vector<float> pre_scale(m, xs->scale);
    auto fp8_panels = [&](int) {
      return GemmE4m3PanelRowScales(
          xq.data(), pre_scale.data(),
          w_fp8_panels_[next_fp8_panels++ % w_fp8_panels_.size()].data(),
          w_scale_, m, n, k, y.data(), DType::kF32, options_);
    };
    std::vector<std::function<absl::Status(int)>> calls = {bf16, fp8,
                                                           fp8_quant};
    if (c_.k_blocks > 0) calls.push_back(fp8_blocks);
    if (c_.panels) {
      calls.push_back(bf16_panels);
      calls.push_back(fp8_quant_panels);
      calls.push_back(fp8_panels);
    }
    if (c_.row_groups > 0) calls.push_back(fp8_row_groups);
    absl::StatusOr<std::vector<double>> t = TimeCpuMs(calls, c_);
    if (!t.ok()) return t.status();
    row.bf16_ms = (*t)[0];
    row.fp8_ms = (*t)[1];
    row.fp8_quant_ms = (*t)[2];
    if (c_.k_blocks > 0) row.fp8_blocks_ms = (*t)[3];
    if (c_.panels) {
      row.bf16_panels_ms = (*t)[c_.k_blocks > 0 ? 4 : 3];
      row.fp8_quant_panels_ms = (*t)[c_.k_blocks > 0 ? 5 : 4];
      row.fp8_panels_ms = (*t)[c_.k_blocks > 0 ? 6 : 5];
    }
    if (c_.row_groups > 0) {
      row.rg_ways = {"cpu"};
      row.rg_ms = {t->back()};
      row.rg_paths = {"cpu"};
    }
    // The quantization alone, on its own, input in cache (as it is in a
    // forward pass, right after the op that produced it).
    auto quant = [&](int) {
      return QuantizeE4m3Dynamic(x.data(), m * k, xq.data(), options_).status();
    };
    Config quick = c_;
    quick.min_time_ms = std::min(c_.min_time_ms, 20.0);
    absl::StatusOr<std::vector<double>> tq = TimeCpuMs({quant}, quick);
    if (!tq.ok()) return tq.status();
    row.quant_us = (*tq)[0] * 1e3;
    row.bytes = double(n) * k + double(m) * k * sizeof(float) +
                double(m) * n * sizeof(float);
    row.bf16_path = row.fp8_path = "cpu";
    if (c_.k_blocks > 0) row.blocks_path = "cpu";
    return row;
  }

 private:
  const Config c_;
  const CpuKernelOptions options_;
  Shape shape_{};
  float w_scale_ = 1.0f;
  std::vector<AlignedVector<Bf16>> w_bf16_;
  std::vector<AlignedVector<uint8_t>> w_fp8_;
  std::vector<AlignedVector<Bf16>> w_panels_;  // with --panels
  std::vector<AlignedVector<uint8_t>> w_fp8_panels_;
};

#if defined(OCTET_HAVE_CUDA)

// Device memory owned by the benchmark.
struct DeviceMem {
  void* p = nullptr;
  DeviceMem() = default;
  DeviceMem(DeviceMem&& o) noexcept : p(o.p) { o.p = nullptr; }
  ~DeviceMem() { cudaFree(p); }
  absl::Status Alloc(size_t bytes) {
    cudaFree(p);
    p = nullptr;
    OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    return absl::OkStatus();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(const Config& c) : c_(c) {}

  absl::Status Init() {
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
    absl::StatusOr<std::unique_ptr<CublasLtGemm>> g = CublasLtGemm::Create();
    if (!g.ok()) return g.status();
    gemm_ = std::move(*g);
    absl::StatusOr<std::unique_ptr<CudaE4m3Quantizer>> q =
        CudaE4m3Quantizer::Create();
    if (!q.ok()) return q.status();
    quantizer_ = std::move(*q);
    return absl::OkStatus();
  }
  ~CudaBackend() override {
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string Name() const override { return "cuda"; }
  std::vector<std::string> RowGroupWays() const override {
    std::vector<std::string> ways;
    for (int w = 0; w < CublasLtGemm::kRowScalings; ++w) {
      const auto way = static_cast<CublasLtGemm::RowScaling>(w);
      if (gemm_->RowScalingAvailable(way)) {
        ways.emplace_back(CublasLtGemm::RowScalingName(way));
      }
    }
    return ways;
  }
  std::string Describe() const override {
    return absl::StrCat("cuda: ", DescribeCudaDevice(0),
                        ", cuBLASLt, timed by CUDA graph replay");
  }
  std::string Notes() const override {
    return "activations bf16 (octet's GPU activation dtype), output bf16";
  }
  std::string Timing() const override {
    return "each cell: mean per call over a CUDA graph of >= 20 calls";
  }

  absl::StatusOr<double> ReadBandwidthGBps() override {
    return CudaReadBandwidthGBps(size_t{4} << 30, 5);
  }

  absl::Status PrepareShape(const Shape& s) override {
    shape_ = s;
    const int64_t nk = s.n * s.k;
    const AlignedVector<Bf16> w16 = MakeWeights(s).bf16;
    w_bf16_.clear();
    w_fp8_.clear();
    for (int64_t i = 0; i < Copies(c_.rotate_bytes, 2 * nk); ++i) {
      DeviceMem d;
      absl::Status st = d.Alloc(2 * nk);
      if (!st.ok()) return st;
      OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          d.p, w16.data(), 2 * nk, cudaMemcpyHostToDevice, stream_));
      // A pageable copy may still be in flight when the call returns: wait
      // before the host buffer (and, below, the device copy) is used.
      OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      w_bf16_.push_back(std::move(d));
    }
    // Quantize the device weights once, as a worker does at load.
    absl::Status st = w_scale_.Alloc(sizeof(float));
    if (!st.ok()) return st;
    for (int64_t i = 0; i < Copies(c_.rotate_bytes, nk); ++i) {
      DeviceMem d;
      if (!(st = d.Alloc(nk)).ok()) return st;
      st = quantizer_->QuantizeDynamic(w_bf16_[0].p, DType::kBf16, nk,
                                       d.as<uint8_t>(), w_scale_.as<float>(),
                                       stream_);
      if (!st.ok()) return st;
      w_fp8_.push_back(std::move(d));
    }
    OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::StatusOr<Row> Measure(int64_t m) override {
    const int64_t n = shape_.n, k = shape_.k;
    const AlignedVector<Bf16> x16 = MakeActivations(m, k).bf16;
    DeviceMem dx, dxq, dxs, dy, dsums;
    absl::Status st;
    if (!(st = dx.Alloc(2 * m * k)).ok() || !(st = dxq.Alloc(m * k)).ok() ||
        !(st = dxs.Alloc(4)).ok() || !(st = dy.Alloc(2 * m * n)).ok() ||
        !(st = dsums.Alloc(4 * m * n)).ok()) {
      return st;
    }
    OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        dx.p, x16.data(), 2 * m * k, cudaMemcpyHostToDevice, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    auto quant = [&](int) {
      return quantizer_->QuantizeDynamic(dx.p, DType::kBf16, m * k,
                                         dxq.as<uint8_t>(), dxs.as<float>(),
                                         stream_);
    };
    st = quant(0);
    if (!st.ok()) return st;
    auto bf16 = [&](int i) {
      return gemm_->Bf16(dx.as<Bf16>(), w_bf16_[i % w_bf16_.size()].as<Bf16>(),
                         m, n, k, dy.p, DType::kBf16, stream_);
    };
    auto fp8 = [&](int i) {
      return gemm_->E4m3(dxq.as<uint8_t>(), dxs.as<float>(),
                         w_fp8_[i % w_fp8_.size()].as<uint8_t>(),
                         w_scale_.as<float>(), m, n, k, dy.p, DType::kBf16,
                         stream_);
    };
    auto fp8_quant = [&](int i) {
      absl::Status s = quant(i);
      return s.ok() ? fp8(i) : s;
    };
    Row row{.m = m, .n = n, .k = k};
    // The path is chosen on the host when a call is enqueued, so the last
    // captured call's path is the one every replay ran.
    auto path = [&] {
      return std::string(CublasLtGemm::PathName(gemm_->LastPath()));
    };
    absl::StatusOr<double> t;
    if (!(t = TimeMs(bf16)).ok()) return t.status();
    row.bf16_ms = *t;
    row.bf16_path = path();
    if (!(t = TimeMs(fp8)).ok()) return t.status();
    row.fp8_ms = *t;
    row.fp8_path = path();
    if (!(t = TimeMs(fp8_quant)).ok()) return t.status();
    row.fp8_quant_ms = *t;
    // fp8_quant's GEMM is fp8's (same shape, same plan); should they ever
    // differ, one of them was not cuBLASLt.
    if (path() != row.fp8_path) row.fp8_path = kFallbackPath;
    if (!(t = TimeMs(quant)).ok()) return t.status();
    row.quant_us = *t * 1e3;
    if (c_.k_blocks > 0) {
      auto fp8_blocks = [&](int i) {
        return gemm_->BlockSums(dxq.p, w_fp8_[i % w_fp8_.size()].p,
                                DType::kE4m3, m, n, k, c_.k_blocks, k,
                                dsums.as<float>(), stream_);
      };
      if (!(t = TimeMs(fp8_blocks)).ok()) return t.status();
      row.fp8_blocks_ms = *t;
      row.blocks_path = path();
    }
    if (c_.row_groups > 0) {
      absl::Status rg = MeasureRowGroups(m, dx, dxq, &row);
      if (!rg.ok()) return rg;
    }
    row.bytes = double(n) * k + double(m) * k * 2 + double(m) * n * 2;
    return row;
  }

 private:
  // The fp8rg columns: E4m3RowGroups with the rows in min(G, M) sequences,
  // once with each RowScaling way; and the rgq columns: the quantization
  // of x with those sequences' scales, in one launch and in three.
  absl::Status MeasureRowGroups(int64_t m, const DeviceMem& dx,
                                const DeviceMem& dxq, Row* row) {
    const int64_t n = shape_.n, k = shape_.k;
    const std::vector<int32_t> group = RowGroupOfRows(m, c_.row_groups);
    std::vector<float> scales(group.back() + 1);
    for (size_t g = 0; g < scales.size(); ++g) {
      scales[g] = 0.01f * (1.0f + 0.125f * float(g % 8));
    }
    DeviceMem dgroup, dscales, dy;
    absl::Status st;
    if (!(st = dgroup.Alloc(4 * m)).ok() ||
        !(st = dscales.Alloc(4 * scales.size())).ok() ||
        !(st = dy.Alloc(2 * m * n)).ok()) {
      return st;
    }
    OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        dgroup.p, group.data(), 4 * m, cudaMemcpyHostToDevice, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dscales.p, scales.data(), 4 * scales.size(),
                        cudaMemcpyHostToDevice, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    auto call = [&](int i) {
      return gemm_->E4m3RowGroups(
          dxq.as<uint8_t>(), dscales.as<float>(), dgroup.as<int32_t>(),
          w_fp8_[i % w_fp8_.size()].as<uint8_t>(), w_scale_.as<float>(), m, n,
          k, dy.p, DType::kBf16, stream_);
    };
    for (int w = 0; w < CublasLtGemm::kRowScalings; ++w) {
      const auto way = static_cast<CublasLtGemm::RowScaling>(w);
      if (!gemm_->RowScalingAvailable(way)) continue;
      gemm_->SetRowScaling(m, 0, n, k, false, way);
      absl::StatusOr<double> t = TimeMs(call);
      if (!t.ok()) return t.status();
      row->rg_ways.emplace_back(CublasLtGemm::RowScalingName(way));
      row->rg_ms.push_back(*t);
      row->rg_paths.emplace_back(CublasLtGemm::PathName(gemm_->LastPath()));
    }
    return MeasureGroupQuantization(m, dx, dgroup, group.back() + 1, row);
  }

  // rgq_us and rgq3_us, into codes of their own (dxq holds the GEMMs'
  // input).
  absl::Status MeasureGroupQuantization(int64_t m, const DeviceMem& dx,
                                        const DeviceMem& dgroup, int64_t groups,
                                        Row* row) {
    const int64_t k = shape_.k;
    DeviceMem dq, dabsmax, dscale;
    absl::Status st;
    if (!(st = dq.Alloc(m * k)).ok() ||
        !(st = dabsmax.Alloc(4 * groups)).ok() ||
        !(st = dscale.Alloc(4 * groups)).ok()) {
      return st;
    }
    const int32_t* map = dgroup.as<int32_t>();
    auto one = [&](int) -> absl::Status {
      return quantizer_->QuantizeRowGroups(
          dx.p, DType::kBf16, m, k, map, groups, dabsmax.as<float>(),
          dq.as<uint8_t>(), dscale.as<float>(), stream_);
    };
    auto three = [&](int) -> absl::Status {
      absl::Status s = quantizer_->GroupAbsMax(
          dx.p, DType::kBf16, m, k, map, groups, dabsmax.as<float>(), stream_);
      if (!s.ok()) return s;
      return quantizer_->GroupQuantize(dx.p, DType::kBf16, m, k, map, groups,
                                       dabsmax.as<float>(), dq.as<uint8_t>(),
                                       dscale.as<float>(), stream_);
    };
    absl::StatusOr<double> t1 = TimeMs(one);
    if (!t1.ok()) return t1.status();
    absl::StatusOr<double> t3 = TimeMs(three);
    if (!t3.ok()) return t3.status();
    row->rg_quant_us = *t1 * 1e3;
    row->rg_quant_split_us = *t3 * 1e3;
    return absl::OkStatus();
  }

  // Mean time per call, from replaying a CUDA graph of `reps` calls (so
  // launch overhead is the GPU's, not the host's), after warm-up.
  absl::StatusOr<double> TimeMs(const std::function<absl::Status(int)>& call) {
    for (int i = 0; i < 3; ++i) {
      absl::Status s = call(i);
      if (!s.ok()) return s;
    }
    OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    // Estimate one call to size the graph.
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream_));
    for (int i = 0; i < 5; ++i) {
      absl::Status s = call(i);
      if (!s.ok()) return s;
    }
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
    float est = 0;
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&est, start_, stop_));
    const int reps =
        c_.reps > 0
            ? c_.reps
            : static_cast<int>(std::clamp(
                  c_.min_time_ms / std::max(est / 5, 1e-3f), 20.0, 2000.0));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    absl::Status captured = absl::OkStatus();
    for (int i = 0; i < reps && captured.ok(); ++i) captured = call(i);
    OCTET_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream_, &graph));
    if (!captured.ok()) {
      cudaGraphDestroy(graph);
      return captured;
    }
    OCTET_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, 0));
    OCTET_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream_));  // warm
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
    float ms = 0;
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return double(ms) / reps;
  }

  const Config c_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
  std::unique_ptr<CudaE4m3Quantizer> quantizer_;
  Shape shape_{};
  DeviceMem w_scale_;
  std::vector<DeviceMem> w_bf16_, w_fp8_;
};

#endif  // OCTET_HAVE_CUDA

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const Config& c) {
#if defined(OCTET_HAVE_CUDA)
  const bool have_gpu = CudaDeviceSupported(0);
  if (c.backend == "cuda" || (c.backend == "auto" && have_gpu)) {
    if (!have_gpu) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--backend=cuda: no usable CUDA device (", DescribeCudaDevice(0),
          "; octet needs compute capability ", kMinCudaComputeCapability / 10,
          ".", kMinCudaComputeCapability % 10, " or newer)"));
    }
    if (c.panels) {
      return absl::InvalidArgumentError(
          "--panels: the panel GEMM is the CPU's; add --backend=cpu");
    }
    auto b = std::make_unique<CudaBackend>(c);
    absl::Status s = b->Init();
    if (!s.ok()) return s;
    return std::unique_ptr<Backend>(std::move(b));
  }
#else
  if (c.backend == "cuda") {
    return absl::FailedPreconditionError(
        "--backend=cuda: this build has no CUDA backend (OCTET_CUDA=OFF or no "
        "toolkit)");
  }
#endif
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(c));
}

// ---------------------------------------------------------------- output

constexpr char kCsvHeader[] =
    "backend,shape,M,N,K,bf16_ms,fp8_ms,fp8_quant_ms,quant_us,speedup_fp8,"
    "speedup_fp8_quant,gbps,tflops,pct_bw,path,bf16_path,fp8_path,"
    "bf16_tflops,peak_tflops,pct_peak_bf16,pct_peak_fp8_quant,k_blocks,"
    "fp8_blocks_ms,blocks_path,row_groups,fp8rg_ms_by_way,fp8rg_best_ms,"
    "fp8rg_best_way,bf16_panels_ms,fp8_quant_panels_ms,fp8_panels_ms,"
    "rgq_us,rgq3_us\n";

// One CSV line. shape is NxK (out x in); path is "fallback" when either
// GEMM of the cell ran on the fallback kernel, else the GEMMs' path.
// TFLOP/s of an M x N x K GEMM that took `ms`.
double Tflops(const Row& r, double ms) {
  return 2.0 * r.m * r.n * r.k / (ms * 1e-3) / 1e12;
}

// `tflops` as a percentage of `peak`; NaN (printed "nan", "-" in the
// table) where no peak was measured.
double PctOfPeak(double tflops, double peak) {
  return peak > 0 ? 100.0 * tflops / peak : std::nan("");
}

// With --row_groups: the index of the fastest way (the first of equal
// times); -1 without.
int BestWay(const Row& r) {
  if (r.rg_ms.empty()) return -1;
  return static_cast<int>(std::min_element(r.rg_ms.begin(), r.rg_ms.end()) -
                          r.rg_ms.begin());
}

// The row-group columns of a CSV line: G, "way=ms;way=ms", the best.
std::string RowGroupCsv(const Row& r, int64_t row_groups) {
  std::string by_way;
  for (size_t w = 0; w < r.rg_ms.size(); ++w) {
    absl::StrAppend(&by_way, w ? ";" : "",
                    absl::StrFormat("%s=%.6f", r.rg_ways[w], r.rg_ms[w]));
  }
  const int best = BestWay(r);
  return absl::StrFormat("%d,%s,%.6f,%s", row_groups, by_way,
                         best < 0 ? 0.0 : r.rg_ms[best],
                         best < 0 ? "" : r.rg_ways[best]);
}

std::string CsvLine(const std::string& backend, const Row& r, double bw_gbps,
                    double peak, int64_t k_blocks, int64_t row_groups) {
  const double gbps = r.bytes / (r.fp8_quant_ms * 1e-3) / 1e9;
  const double tflops = Tflops(r, r.fp8_quant_ms);
  const double bf16_tflops = Tflops(r, r.bf16_ms);
  return absl::StrFormat(
      "%s,%dx%d,%d,%d,%d,%.6f,%.6f,%.6f,%.3f,%.4f,%.4f,%.2f,%.4f,%.2f,%s,%s,"
      "%s,%.4f,%.4f,%.2f,%.2f,%d,%.6f,%s,%s,%.6f,%.6f,%.6f,%.3f,%.3f\n",
      backend, r.n, r.k, r.m, r.n, r.k, r.bf16_ms, r.fp8_ms, r.fp8_quant_ms,
      r.quant_us, r.bf16_ms / r.fp8_ms, r.bf16_ms / r.fp8_quant_ms, gbps,
      tflops, 100.0 * gbps / bw_gbps,
      r.Fallback() ? kFallbackPath : r.fp8_path.c_str(), r.bf16_path,
      r.fp8_path, bf16_tflops, peak, PctOfPeak(bf16_tflops, peak),
      PctOfPeak(tflops, peak), k_blocks, r.fp8_blocks_ms, r.blocks_path,
      RowGroupCsv(r, row_groups), r.bf16_panels_ms, r.fp8_quant_panels_ms,
      r.fp8_panels_ms, r.rg_quant_us, r.rg_quant_split_us);
}

// A percentage cell of the table, "-" for NaN.
std::string PctCell(double pct) {
  return std::isnan(pct) ? absl::StrFormat("%7s", "-")
                         : absl::StrFormat("%6.1f%%", pct);
}

// A table time, with a `*` when the fallback kernel ran it.
std::string TimeCell(double ms, const std::string& path) {
  return absl::StrFormat("%10.4f%c", ms, path == kFallbackPath ? '*' : ' ');
}

// The table's row-group cells: each way's time, the best over fp8_ms.
std::string RowGroupCells(const Row& r) {
  const int best = BestWay(r);
  if (best < 0) return "";
  std::string cells;
  for (size_t w = 0; w < r.rg_ms.size(); ++w) {
    absl::StrAppend(&cells, " ", TimeCell(r.rg_ms[w], r.rg_paths[w]));
  }
  absl::StrAppend(&cells, absl::StrFormat(" %7.2fx", r.rg_ms[best] / r.fp8_ms));
  if (r.rg_quant_us > 0) {
    absl::StrAppend(&cells, absl::StrFormat(" %8.2f %8.2f", r.rg_quant_us,
                                            r.rg_quant_split_us));
  }
  return cells;
}

// The table's --panels cells: bf16p's time, bf16 over it, its share of the
// peak; fp8qp's time, bf16p over it, its share of the peak; bf16p over
// fp8p.
std::string PanelCells(const Row& r, double peak) {
  return absl::StrFormat(
      " %s %7.2fx %s %s %7.2fx %s %7.2fx", TimeCell(r.bf16_panels_ms, "cpu"),
      r.bf16_ms / r.bf16_panels_ms,
      PctCell(PctOfPeak(Tflops(r, r.bf16_panels_ms), peak)),
      TimeCell(r.fp8_quant_panels_ms, "cpu"),
      r.bf16_panels_ms / r.fp8_quant_panels_ms,
      PctCell(PctOfPeak(Tflops(r, r.fp8_quant_panels_ms), peak)),
      r.bf16_panels_ms / r.fp8_panels_ms);
}
void PrintRow(const Config& c, const std::string& backend, const Row& r,
              double bw_gbps, double peak, std::FILE* csv_out) {
  const double gbps = r.bytes / (r.fp8_quant_ms * 1e-3) / 1e9;
  const double tflops = Tflops(r, r.fp8_quant_ms);
  const double pct = 100.0 * gbps / bw_gbps;
  const double x_fp8 = r.bf16_ms / r.fp8_ms,
               x_fp8q = r.bf16_ms / r.fp8_quant_ms;
  if (c.csv) {
    absl::PrintF("%s",
                 CsvLine(backend, r, bw_gbps, peak, c.k_blocks, c.row_groups));
  } else {
    absl::PrintF(
        "%6d %6d %6d %s%s%s %9.2f %7.2fx %7.2fx %8.1f %8.3f %6.1f%% %s "
        "%s%s%s%s\n",
        r.m, r.n, r.k, TimeCell(r.bf16_ms, r.bf16_path),
        TimeCell(r.fp8_ms, r.fp8_path), TimeCell(r.fp8_quant_ms, r.fp8_path),
        r.quant_us, x_fp8, x_fp8q, gbps, tflops, pct,
        PctCell(PctOfPeak(Tflops(r, r.bf16_ms), peak)),
        PctCell(PctOfPeak(tflops, peak)),
        c.k_blocks > 0
            ? absl::StrFormat(" %s %7.2fx",
                              TimeCell(r.fp8_blocks_ms, r.blocks_path),
                              r.fp8_blocks_ms / r.fp8_ms)
            : std::string(),
        c.panels ? PanelCells(r, peak) : std::string(), RowGroupCells(r));
  }
  std::fflush(stdout);
  if (csv_out != nullptr) {
    absl::FPrintF(csv_out, "%s",
                  CsvLine(backend, r, bw_gbps, peak, c.k_blocks, c.row_groups));
    std::fflush(csv_out);
  }
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "FP8 (e4m3) vs BF16 GEMM benchmark on Mistral-7B's linear shapes.\n"
      "  bench_gemm [--backend=cpu|cuda] [--m=1,16,256] [--format=csv] ...");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<Config> config = ParseFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "bench_gemm: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  const Config& c = *config;
  absl::StatusOr<std::unique_ptr<Backend>> backend = MakeBackend(c);
  if (!backend.ok()) {
    std::fprintf(stderr, "bench_gemm: %s\n",
                 std::string(backend.status().message()).c_str());
    return 2;
  }
  Backend& b = **backend;
  absl::StatusOr<double> bw = b.ReadBandwidthGBps();
  if (!bw.ok()) {
    std::fprintf(stderr, "bench_gemm: measuring bandwidth: %s\n",
                 std::string(bw.status().message()).c_str());
    return 1;
  }
  const bool cpu = b.Name() == "cpu";
  const double peak = b.DotPeakTflops();
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> csv_out;
  if (!c.csv_out.empty()) {
    csv_out.reset(std::fopen(c.csv_out.c_str(), "w"));
    if (csv_out == nullptr) {
      std::fprintf(stderr, "bench_gemm: --csv_out: cannot write %s\n",
                   c.csv_out.c_str());
      return 2;
    }
    absl::FPrintF(csv_out.get(), "%s", kCsvHeader);
  }
  if (c.csv) {
    absl::PrintF("%s", kCsvHeader);
  } else {
    absl::PrintF("bench_gemm  %s\n", b.Describe());
    absl::PrintF("memory read bandwidth, measured now: %.1f GB/s\n", *bw);
    if (peak > 0) {
      absl::PrintF("dot-product peak, measured now: %.3f TFLOP/s (%s)\n", peak,
                   b.DotPeakName());
    }
    absl::PrintF(
        "%s; weights rotate over >= %d MiB per dtype\n%s\n"
        "fp8q = dynamic activation quantization + FP8 GEMM; quant_us = the "
        "quantization alone; x = speedup over bf16;\nGB/s, TFLOP/s and %%bw "
        "are for fp8q (bytes = weights + activations in + output); "
        "%%pk_bf16, %%pk_fp8q = TFLOP/s of bf16 and fp8q as a share of the "
        "dot-product peak (- : not measured); * = the fallback kernel ran "
        "it, not cuBLASLt%s%s%s\n\n",
        b.Notes(), c.rotate_bytes >> 20, b.Timing(),
        c.k_blocks > 0
            ? absl::StrFormat(
                  ";\nfp8blk = the FP8 GEMM with K in %d blocks summed apart "
                  "(row-parallel layers' TP-invariant sums, unscaled); "
                  "blk/fp8 = its time over fp8_ms",
                  c.k_blocks)
            : std::string(),
        c.panels ? ";\nbf16p, fp8qp = BF16 and fp8q over weights packed into "
                   "panels (outer products); x_bf16p = bf16_ms / bf16p_ms; "
                   "p:x_fp8q = bf16p_ms / fp8qp_ms; p:x_fp8 = bf16p_ms / "
                   "fp8p_ms, fp8p the e4m3 panels GEMM over pre-quantized "
                   "activations"
                 : "",
        c.row_groups > 0
            ? absl::StrFormat(
                  ";\nrg:WAY = the FP8 GEMM with per-sequence scales, the M "
                  "rows in min(%d, M) sequences, each way this backend has; "
                  "rg/fp8 = the fastest over fp8_ms; rgq_us, rgq3_us (GPU) = "
                  "those rows quantized with per-sequence scales in one "
                  "launch, and in three",
                  c.row_groups)
            : std::string());
    std::string rg_header;
    if (c.row_groups > 0) {
      for (const std::string& way : b.RowGroupWays()) {
        absl::StrAppend(&rg_header,
                        absl::StrFormat(" %10s ", "rg:" + way.substr(0, 7)));
      }
      absl::StrAppend(&rg_header, absl::StrFormat(" %7s", "rg/fp8"));
      if (b.Name() == "cuda") {
        absl::StrAppend(&rg_header,
                        absl::StrFormat(" %8s %8s", "rgq_us", "rgq3_us"));
      }
    }
    absl::PrintF(
        "%6s %6s %6s %10s  %10s  %10s  %9s %8s %8s %8s %8s %7s %7s %7s%s%s%s\n",
        "M", "N", "K", "bf16_ms", "fp8_ms", "fp8q_ms", "quant_us", "x_fp8",
        "x_fp8q", "GB/s", "TFLOP/s", "%bw", "%pk_bf16", "%pk_fp8q",
        c.k_blocks > 0 ? absl::StrFormat(" %10s  %8s", "fp8blk_ms", "blk/fp8")
                       : std::string(),
        c.panels
            ? absl::StrFormat(" %10s  %8s %7s %10s  %8s %7s %8s", "bf16p_ms",
                              "x_bf16p", "%pk_bf16p", "fp8qp_ms", "p:x_fp8q",
                              "%pk_fp8qp", "p:x_fp8")
            : std::string(),
        rg_header);
  }
  std::vector<int64_t> skipped;
  int fallback_cells = 0;
  for (const Shape& s : c.shapes) {
    absl::Status st = b.PrepareShape(s);
    if (!st.ok()) {
      std::fprintf(stderr, "bench_gemm: shape %ldx%ld: %s\n", long(s.n),
                   long(s.k), std::string(st.message()).c_str());
      return 1;
    }
    for (int64_t m : c.ms) {
      if (cpu && m > c.cpu_max_m) {
        if (std::find(skipped.begin(), skipped.end(), m) == skipped.end()) {
          skipped.push_back(m);
        }
        continue;
      }
      absl::StatusOr<Row> row = b.Measure(m);
      if (!row.ok()) {
        std::fprintf(stderr, "bench_gemm: M=%ld N=%ld K=%ld: %s\n", long(m),
                     long(s.n), long(s.k),
                     std::string(row.status().message()).c_str());
        return 1;
      }
      PrintRow(c, b.Name(), *row, *bw, peak, csv_out.get());
      if (row->Fallback()) ++fallback_cells;
    }
  }
  if (fallback_cells > 0) {
    // On stderr too, so that --format=csv (stdout a clean CSV) says it.
    if (!c.csv) {
      absl::PrintF(
          "\n* %d cell(s) ran a GEMM on the fallback kernel (a simple CUDA "
          "kernel for shapes cuBLASLt refuses), not cuBLASLt: those times are "
          "not cuBLASLt's\n",
          fallback_cells);
    }
    std::fprintf(stderr,
                 "bench_gemm: %d cell(s) ran on the fallback GEMM, not "
                 "cuBLASLt (path column / * in the table)\n",
                 fallback_cells);
  }
  if (csv_out != nullptr &&
      (std::ferror(csv_out.get()) || std::fclose(csv_out.release()) != 0)) {
    std::fprintf(stderr, "bench_gemm: --csv_out: writing %s failed\n",
                 c.csv_out.c_str());
    return 1;
  }
  if (!skipped.empty()) {
    std::string list;
    for (int64_t m : skipped)
      absl::StrAppend(&list, list.empty() ? "" : ",", m);
    std::fprintf(stderr,
                 "bench_gemm: skipped CPU rows M=%s (above --cpu_max_m=%ld); "
                 "run them with --cpu_max_m=%ld\n",
                 list.c_str(), long(c.cpu_max_m), long(skipped.back()));
  }
  return 0;
}

}  // namespace
}  // namespace octet::bench

int main(int argc, char** argv) { return octet::bench::Main(argc, argv); }
