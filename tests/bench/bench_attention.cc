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
//   bench_attention [--lengths 128,512,2048] [--heads 32] [--kv_heads 8]
//                   [--head_dim 64] [--decode_batch 16] [--rounds 5]
//                   [--threads 0]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/attention_inputs.h"

ABSL_FLAG(std::string, lengths, "128,512,2048",
          "context lengths, comma-separated");
ABSL_FLAG(int32_t, heads, 32, "query heads");
ABSL_FLAG(int32_t, kv_heads, 8, "KV heads (dividing --heads)");
ABSL_FLAG(int32_t, head_dim, 64, "head dimension");
ABSL_FLAG(int32_t, decode_batch, 16, "sequences of the decode case");
ABSL_FLAG(int32_t, rounds, 5, "timed rounds of each implementation");
ABSL_FLAG(int32_t, threads, 0, "CPU threads; 0: one per core");

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

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage("CPU attention kernel vs its reference");
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
