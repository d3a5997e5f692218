// bench_attention: the CPU attention kernel (kernels/cpu/attention.h)
// against its scalar reference (AttentionRef), side by side in one run.
//
// For each prompt length it builds one sequence's prefill (every token
// attends its causal context) and a decode batch (--decode_batch sequences
// of that context, one new token each) with the model shape of the flags
// (default: the llama-1b preset's 32 query heads, 8 KV heads, head_dim 64),
// random queries, keys and values in a paged cache, and times both
// implementations in alternating rounds (the median of each, after a
// warm-up round), printing ms per layer, the kernel's speedup and the
// largest difference between their outputs.
//
// With --device=cuda (a build with the CUDA backend) it compares, for each
// prefill, the CUDA backend's two attentions through the Backend
// interface, on metadata as the model gives it (query tiles included):
// octet's kernel (attention_plan.h) and FlashInfer's on the host's plan
// (attention_flashinfer.h, PlanAttention), timed with device events over
// 10 calls back to back, the order alternating from round to round; the
// host plan, made once per forward in a model, is timed apart on the host.
// The decode case runs octet's kernel only (FlashInfer is not planned for
// decodes).
//
//   bench_attention [--lengths 128,512,2048] [--heads 32] [--kv_heads 8]
//                   [--head_dim 64] [--decode_batch 16] [--rounds 5]
//                   [--threads 0] [--device cpu|cuda]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/bf16.h"
#include "base/status_macros.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/attention_inputs.h"
#ifdef OCTET_HAVE_CUDA
#include "kernels/cuda/backend.h"
#endif

ABSL_FLAG(std::string, lengths, "128,512,2048",
          "context lengths, comma-separated");
ABSL_FLAG(int32_t, heads, 32, "query heads");
ABSL_FLAG(int32_t, kv_heads, 8, "KV heads (dividing --heads)");
ABSL_FLAG(int32_t, head_dim, 64, "head dimension");
ABSL_FLAG(int32_t, decode_batch, 16, "sequences of the decode case");
ABSL_FLAG(int32_t, rounds, 5, "timed rounds of each implementation");
ABSL_FLAG(int32_t, threads, 0, "CPU threads; 0: one per core");
ABSL_FLAG(std::string, device, "cpu",
          "cpu: the CPU kernel vs its reference; cuda: octet's CUDA kernel "
          "vs FlashInfer's");

namespace octet::bench {
namespace {

constexpr int64_t kBlockSize = 16;

// Queries, a paged cache and its metadata: `seqs` sequences of `context`
// positions, the last `tokens` of each new in this call.
using Case = testing::AttentionInputs;

Case MakeCase(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t seqs,
              int64_t context, int64_t tokens) {
  Case c;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.block_size = kBlockSize;
  c.max_blocks = (context + kBlockSize - 1) / kBlockSize;
  const int64_t slots = seqs * c.max_blocks * kBlockSize;
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  c.k.resize(slots * kv_heads * head_dim);
  c.v.resize(c.k.size());
  for (float& x : c.k) x = normal(gen);
  for (float& x : c.v) x = normal(gen);
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t b = 0; b < c.max_blocks; ++b) {
      c.tables.push_back(static_cast<int32_t>(b * seqs + s));  // interleaved
    }
    for (int64_t j = context - tokens; j < context; ++j) {
      c.positions.push_back(static_cast<int32_t>(j));
      c.token_seq.push_back(static_cast<int32_t>(s));
      c.slots.push_back(static_cast<int32_t>(
          c.tables[s * c.max_blocks + j / kBlockSize] * kBlockSize +
          j % kBlockSize));
    }
  }
  c.q.resize(c.positions.size() * heads * head_dim);
  for (float& x : c.q) x = normal(gen);
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times the reference and the kernel in alternating rounds; prints one row.
int Compare(const char* what, int64_t context, const Case& c, int rounds,
            int threads) {
  const AttentionMetadata meta = c.Meta();
  const int64_t stride = c.q_stride();
  std::vector<float> ref(c.positions.size() * stride), got(ref.size());
  const CpuKernelOptions options{.isa = CpuIsa::kAuto, .num_threads = threads};
  std::vector<double> ref_ms, got_ms;
  for (int r = 0; r <= rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cpu::AttentionRef(c.q.data(), stride, c.heads, c.kv_heads, c.head_dim, meta,
                      c.k.data(), c.v.data(), ref.data(), threads);
    auto t1 = std::chrono::steady_clock::now();
    const absl::Status s =
        cpu::Attention(c.q.data(), stride, c.heads, c.kv_heads, c.head_dim,
                       meta, c.k.data(), c.v.data(), got.data(), options);
    auto t2 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "bench_attention: %s\n",
                   std::string(s.message()).c_str());
      return 1;
    }
    if (r == 0) continue;  // warm-up
    ref_ms.push_back(
        std::chrono::duration<double, std::milli>(t1 - t0).count());
    got_ms.push_back(
        std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  double diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(double(ref[i]) - got[i]));
  }
  const double a = Median(ref_ms), b = Median(got_ms);
  std::printf("%-8s %8lld %7zu %12.3f %12.3f %8.2fx %10.2e\n", what,
              static_cast<long long>(context), c.positions.size(), a, b, a / b,
              diff);
  return 0;
}

#ifdef OCTET_HAVE_CUDA
// A host array on the device (activations as bfloat16), kept in `keep`.
absl::StatusOr<void*> Upload(Backend& b, const void* p, size_t bytes,
                             std::vector<DeviceBuffer>& keep) {
  absl::StatusOr<DeviceBuffer> d = b.Allocate(bytes);
  if (!d.ok()) return d.status();
  if (absl::Status s = b.CopyToDevice(d->data(), p, bytes); !s.ok()) return s;
  keep.push_back(*std::move(d));
  return keep.back().data();
}
absl::StatusOr<void*> UploadBf16(Backend& b, const std::vector<float>& v,
                                 std::vector<DeviceBuffer>& keep) {
  std::vector<Bf16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = FloatToBf16(v[i]);
  return Upload(b, h.data(), h.size() * sizeof(Bf16), keep);
}
absl::StatusOr<void*> UploadInts(Backend& b, const std::vector<int32_t>& v,
                                 std::vector<DeviceBuffer>& keep) {
  return Upload(b, v.data(), v.size() * sizeof(int32_t), keep);
}

// A case on the GPU, described as the model describes a forward: the
// query tiles the backend asks for where a sequence has several new
// tokens, and the host's view of the sequences for PlanAttention.
struct GpuCase {
  std::vector<DeviceBuffer> keep;
  void* in[3] = {};   // q, k cache, v cache
  void* out[2] = {};  // octet's, FlashInfer's
  AttentionMetadata meta;
  std::vector<int32_t> query_start = {0}, context, tiles;
};

absl::StatusOr<std::unique_ptr<GpuCase>> UploadCase(Backend& gpu,
                                                    const Case& c) {
  auto g = std::make_unique<GpuCase>();
  const int64_t tokens = static_cast<int64_t>(c.positions.size());
  const std::vector<float>* acts[] = {&c.q, &c.k, &c.v};
  for (int i = 0; i < 3; ++i) {
    OCTET_ASSIGN_OR_RETURN(g->in[i], UploadBf16(gpu, *acts[i], g->keep));
  }
  for (void*& o : g->out) {
    OCTET_ASSIGN_OR_RETURN(
        o, UploadBf16(gpu, std::vector<float>(tokens * c.q_stride()), g->keep));
  }
  std::vector<int32_t> first, count;
  for (int64_t r = 0; r < tokens; ++r) {
    if (r + 1 == tokens || c.token_seq[r + 1] != c.token_seq[r]) {
      first.push_back(g->query_start.back());
      count.push_back(static_cast<int32_t>(r + 1) - first.back());
      g->query_start.push_back(static_cast<int32_t>(r + 1));
      g->context.push_back(c.positions[r] + 1);
    }
  }
  g->meta = c.Meta();
  const int32_t* arrays[4];
  const std::vector<int32_t>* ints[] = {&c.positions, &c.slots, &c.token_seq,
                                        &c.tables};
  for (int i = 0; i < 4; ++i) {
    OCTET_ASSIGN_OR_RETURN(void* d, UploadInts(gpu, *ints[i], g->keep));
    arrays[i] = static_cast<const int32_t*>(d);
  }
  g->meta.positions = arrays[0];
  g->meta.slots = arrays[1];
  g->meta.token_seq = arrays[2];
  g->meta.block_tables = arrays[3];
  const int64_t tile = gpu.attention_query_tile();
  if (tile > 0 && tokens > static_cast<int64_t>(first.size())) {
    g->tiles = QueryTiles(first, count, static_cast<int32_t>(tile));
    OCTET_ASSIGN_OR_RETURN(void* d, UploadInts(gpu, g->tiles, g->keep));
    g->meta.query_tiles = static_cast<const int32_t*>(d);
    g->meta.num_query_tiles = static_cast<int64_t>(g->tiles.size() / 2);
  }
  return g;
}

// Milliseconds per call of one way (octet's kernel, or FlashInfer's on the
// last plan), from `reps` calls back to back between two device marks.
absl::StatusOr<double> TimeWay(Backend& gpu, const Case& c, GpuCase& g,
                               bool flashinfer, int reps) {
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> clock, gpu.NewClock());
  AttentionMetadata m = g.meta;
  m.host_planned = flashinfer;
  OCTET_RETURN_IF_ERROR(clock->Mark());
  for (int i = 0; i < reps; ++i) {
    OCTET_RETURN_IF_ERROR(gpu.Attention(g.in[0], c.q_stride(), c.heads,
                                        c.kv_heads, c.head_dim, m, g.in[1],
                                        g.in[2], g.out[flashinfer ? 1 : 0]));
  }
  OCTET_RETURN_IF_ERROR(clock->Mark());
  OCTET_ASSIGN_OR_RETURN(const std::vector<double> ms, clock->Read());
  return (ms[1] - ms[0]) / reps;
}

// The largest difference between the two ways' outputs.
absl::StatusOr<double> MaxDiff(Backend& gpu, const GpuCase& g, int64_t n) {
  std::vector<Bf16> a(n), b(n);
  OCTET_RETURN_IF_ERROR(gpu.CopyToHost(a.data(), g.out[0], n * sizeof(Bf16)));
  OCTET_RETURN_IF_ERROR(gpu.CopyToHost(b.data(), g.out[1], n * sizeof(Bf16)));
  double diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(
        diff, std::fabs(double(Bf16ToFloat(a[i])) - double(Bf16ToFloat(b[i]))));
  }
  return diff;
}

// One case on the GPU: octet's kernel and, where the backend plans it,
// FlashInfer's, in rounds whose order alternates, each way 10 calls back to
// back; the host plan (once per forward in a model) is timed on the host
// each round and apart. Prints one row.
absl::Status CompareOnCuda(Backend& gpu, const char* what, int64_t context,
                           const Case& c, int rounds) {
  constexpr int kReps = 10;
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<GpuCase> g, UploadCase(gpu, c));
  std::vector<double> octet_ms, flashinfer_ms, plan_ms;
  bool planned = false;
  for (int r = 0; r <= rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    OCTET_ASSIGN_OR_RETURN(
        planned, gpu.PlanAttention({g->query_start, g->context, c.tables},
                                   g->meta, c.heads, c.kv_heads, c.head_dim));
    const auto t1 = std::chrono::steady_clock::now();
    for (const bool flashinfer : {r % 2 == 1, r % 2 == 0}) {
      if (flashinfer && !planned) continue;
      OCTET_ASSIGN_OR_RETURN(const double ms,
                             TimeWay(gpu, c, *g, flashinfer, kReps));
      if (r > 0) (flashinfer ? flashinfer_ms : octet_ms).push_back(ms);
    }
    if (r > 0 && planned) {  // the first round warms up
      plan_ms.push_back(
          std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  const long long n = context,
                  tokens = static_cast<long long>(c.positions.size());
  if (!planned) {
    std::printf("%-8s %8lld %7lld %12.3f %12s\n", what, n, tokens,
                Median(octet_ms), "-");
    return absl::OkStatus();
  }
  OCTET_ASSIGN_OR_RETURN(const double diff,
                         MaxDiff(gpu, *g, tokens * c.q_stride()));
  const double a = Median(octet_ms), b = Median(flashinfer_ms);
  std::printf("%-8s %8lld %7lld %12.3f %12.3f %8.2fx %10.2e %8.3f\n", what, n,
              tokens, a, b, a / b, diff, Median(plan_ms));
  return absl::OkStatus();
}

int MainOnCuda(const std::vector<int64_t>& lengths, int64_t heads,
               int64_t kv_heads, int64_t head_dim, int64_t batch, int rounds) {
  absl::StatusOr<std::unique_ptr<Backend>> gpu = NewCudaBackend(0);
  if (!gpu.ok()) {
    std::fprintf(stderr, "bench_attention: %s\n",
                 std::string(gpu.status().message()).c_str());
    return 1;
  }
  std::printf(
      "bench_attention: %lld heads, %lld KV heads, head_dim %lld, %s; median "
      "of %d rounds, order alternating, ms per layer (device events, 10 "
      "calls back to back); plan: FlashInfer's host plan of the forward, "
      "ms on the host\n",
      static_cast<long long>(heads), static_cast<long long>(kv_heads),
      static_cast<long long>(head_dim), (*gpu)->Describe().c_str(), rounds);
  std::printf("%-8s %8s %7s %12s %12s %9s %10s %8s\n", "case", "context",
              "tokens", "octet", "flashinfer", "speedup", "max|diff|", "plan");
  for (int64_t n : lengths) {
    for (const bool prefill : {true, false}) {
      const absl::Status s =
          CompareOnCuda(**gpu, prefill ? "prefill" : "decode", n,
                        MakeCase(heads, kv_heads, head_dim, prefill ? 1 : batch,
                                 n, prefill ? n : 1),
                        rounds);
      if (!s.ok()) {
        std::fprintf(stderr, "bench_attention: %s\n",
                     std::string(s.message()).c_str());
        return 1;
      }
    }
  }
  return 0;
}
#endif

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "CPU attention kernel vs its reference; --device=cuda: octet's CUDA "
      "attention vs FlashInfer's");
  absl::ParseCommandLine(argc, argv);
  const int64_t heads = absl::GetFlag(FLAGS_heads),
                kv_heads = absl::GetFlag(FLAGS_kv_heads),
                head_dim = absl::GetFlag(FLAGS_head_dim),
                batch = absl::GetFlag(FLAGS_decode_batch);
  const int rounds = absl::GetFlag(FLAGS_rounds),
            threads = absl::GetFlag(FLAGS_threads);
  std::vector<int64_t> lengths;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_lengths), ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 65536) {
      lengths.clear();
      break;
    }
    lengths.push_back(n);
  }
  if (lengths.empty() || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 ||
      head_dim < 1 || head_dim > 1024 || batch < 1 || batch > 1024 ||
      rounds < 1 || threads < 0) {
    std::fprintf(stderr,
                 "bench_attention: needs --lengths in [1, 65536], --kv_heads "
                 "dividing --heads, --head_dim in [1, 1024], --decode_batch "
                 "in [1, 1024], --rounds >= 1, --threads >= 0\n");
    return 2;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cuda") {
#ifdef OCTET_HAVE_CUDA
    return MainOnCuda(lengths, heads, kv_heads, head_dim, batch, rounds);
#else
    std::fprintf(stderr, "bench_attention: built without CUDA\n");
    return 2;
#endif
  }
  if (device != "cpu") {
    std::fprintf(stderr, "bench_attention: --device is cpu or cuda\n");
    return 2;
  }
  std::printf(
      "bench_attention: %lld heads, %lld KV heads, head_dim %lld, %s, "
      "%d threads; median of %d alternating rounds, ms per layer\n",
      static_cast<long long>(heads), static_cast<long long>(kv_heads),
      static_cast<long long>(head_dim),
      std::string(CpuIsaName(ResolveCpuIsa(CpuIsa::kAuto))).c_str(),
      cpu_internal::ThreadCount({.num_threads = threads}), rounds);
  std::printf("%-8s %8s %7s %12s %12s %9s %10s\n", "case", "context", "tokens",
              "reference", "kernel", "speedup", "max|diff|");
  for (int64_t n : lengths) {
    if (Compare("prefill", n, MakeCase(heads, kv_heads, head_dim, 1, n, n),
                rounds, threads) != 0 ||
        Compare("decode", n, MakeCase(heads, kv_heads, head_dim, batch, n, 1),
                rounds, threads) != 0) {
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace octet::bench

int main(int argc, char** argv) { return octet::bench::Main(argc, argv); }
