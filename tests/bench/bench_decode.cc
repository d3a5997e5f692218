// bench_decode: decode speed of one checkpoint with unquantized vs FP8
// linear layers, measured side by side in one process: both models are
// loaded once, then for each --batch size both are prefilled with the same
// prompts and decode steps alternate between them (A B A B ...) so that a
// noisy or drifting machine affects both alike. Prints, per batch size, each
// one's median ms per step and tokens/s and the FP8 speedup (fp8 tokens/s
// over none's), then one table of every batch size. "none" runs the
// checkpoint's weights unquantized: BF16 GEMMs for a bf16 checkpoint (on the
// GPU against cuBLASLt's BF16, the baseline FP8 has to beat).
//
// A step is what serving runs: the forward and greedy tokens chosen on the
// device (LlamaModel::ForwardSample), only the ids copied back; on CUDA a
// decode batch replays its captured graph (--graph_max_batch=0: never).
//
// Loading a large model dominates the run (the mistral-7b preset is 14 GB,
// loaded twice), so one process measures every batch size.
//
// Each batch size also prints the step's roofline: every weight a step
// reads, read once (LlamaModel::StepWeightBytes: all but the embedding
// table, unless it is the lm_head) at the device's read bandwidth, measured
// at the start of the same run (tests/bench/membw.h), and the share of it
// each model's step reaches (roofline ms over step ms; the KV cache's reads
// and the activations are left out, so a share is an upper bound's
// fraction). A shared VM's bandwidth drifts between that measurement and
// the steps, by 10-20%: a share a little over 100% is that drift.
//
// --quantize_lm_head adds a third model, "fp8+head": FP8 with the lm_head
// in FP8 too (ModelOptions::quantize_lm_head), its steps interleaved with
// the other two.
//
// --profile adds, per batch size, where a step's time goes: after the timed
// steps, --profile_steps eager steps of each model with a clock mark around
// every backend operation (worker/step_profile.h: CUDA events on the GPU),
// printed as one table of ms, share of the timed step and calls per part
// (each projection, quantization, norms, RoPE, KV write, attention,
// sampling, host copies ...), their sum, and the gap between the timed
// (graph-replayed) step and that sum: launch and idle time.
//
// --prefill_reps N adds, per batch size, the prefill's speed: N prefills of
// --prompt_tokens tokens per sequence for each model, on fresh caches,
// alternating between the models; the median ms and tokens/s. With
// --profile, one more prefill of each model is profiled as the steps are
// (shares of the median prefill).
//
//   bench_decode --model DIR [--device auto|cpu|cuda] [--steps 32]
//                [--prompt_tokens 16] [--batch 1,8,32] [--graph_max_batch 64]
//                [--quantize_lm_head] [--profile [--profile_steps 4]]
//                [--prefill_reps 0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/options.h"
#include "model/checkpoint.h"
#include "tests/bench/membw.h"
#include "worker/backends.h"
#include "worker/llama_model.h"
#include "worker/step_profile.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda");
ABSL_FLAG(int32_t, steps, 32, "timed decode steps per model and batch size");
ABSL_FLAG(int32_t, prompt_tokens, 16, "prompt length before decoding");
ABSL_FLAG(std::string, batch, "1",
          "sequences decoded together; a comma-separated list measures each "
          "size in turn with the models loaded once");
ABSL_FLAG(int32_t, threads, 0, "CPU threads; 0 = one per core");
ABSL_FLAG(bool, cpu_panels, true,
          "CPU: pack bfloat16 and e4m3 weights into panels at load (the "
          "outer-product GEMMs); false: rows and the dot-product kernels");
ABSL_FLAG(bool, quantize_lm_head, false,
          "also measure FP8 with an FP8 lm_head (fp8+head)");
ABSL_FLAG(bool, profile, false,
          "after each batch size, profile eager steps: time per part of "
          "the step");
ABSL_FLAG(int32_t, profile_steps, 4, "eager steps each profile averages");
ABSL_FLAG(int32_t, prefill_reps, 0,
          "also time this many prefills of --prompt_tokens per model and "
          "batch size (0: none)");
ABSL_FLAG(int32_t, graph_max_batch, 64,
          "decode batches up to this size replay captured graphs on a "
          "backend that can capture (CUDA); 0: never");

namespace octet {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One model and the KV cache of the batch size being measured.
struct Runner {
  const char* name = "";
  std::unique_ptr<LlamaModel> model = nullptr;
  std::unique_ptr<KvCache> cache = nullptr;
  std::vector<std::vector<int32_t>> tables = {};
  std::vector<double> step_ms = {};
  int64_t position = 0;
};

// What one batch size measured.
struct Result {
  int batch;
  std::vector<double> ms;  // median per step, per runner (none, fp8, ...)
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "bench_decode: %s\n", std::string(s.message()).c_str());
  return 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A fresh cache holding `batch` sequences of `tokens` tokens.
absl::Status NewCache(Runner& r, int batch, int64_t tokens) {
  r.tables.clear();
  r.cache.reset();  // the previous batch size's, freed first
  r.step_ms.clear();
  r.position = 0;
  const int64_t blocks = batch * ((tokens + 15) / 16);
  absl::StatusOr<std::unique_ptr<KvCache>> cache =
      r.model->NewKvCache({.block_size = 16, .num_blocks = blocks});
  if (!cache.ok()) return cache.status();
  r.cache = *std::move(cache);
  r.tables.resize(batch);
  for (auto& t : r.tables) {
    absl::Status s = r.cache->Reserve(tokens, &t);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// `reps` prefills of `prompt` tokens for each of `batch` sequences per
// runner, each on a fresh cache, the runners alternating; prints each one's
// median ms and tokens/s, and each over the first's, and returns the
// medians.
template <typename Prefill>
absl::StatusOr<std::vector<double>> TimePrefills(std::vector<Runner>& runners,
                                                 int reps, int64_t prompt,
                                                 int batch, int64_t tokens,
                                                 Prefill prefill) {
  std::vector<std::vector<double>> ms(runners.size());
  for (int i = 0; i < reps; ++i) {
    for (size_t j = 0; j < runners.size(); ++j) {
      absl::Status s = NewCache(runners[j], batch, tokens);
      if (!s.ok()) return s;
      const auto t0 = Clock::now();
      s = prefill(runners[j]);
      if (!s.ok()) return s;
      ms[j].push_back(SecondsSince(t0) * 1e3);
    }
  }
  std::vector<double> medians;
  for (size_t j = 0; j < runners.size(); ++j) {
    const double med = Median(ms[j]);
    medians.push_back(med);
    std::printf(
        "%-5s prefill median %.2f ms (%lld tokens x %d sequences) = %.1f "
        "tokens/s%s\n",
        runners[j].name, med, static_cast<long long>(prompt), batch,
        prompt * batch * 1e3 / med,
        j == 0 ? ""
               : absl::StrCat(", ", absl::StrFormat("%.2f", Median(ms[0]) / med),
                              "x none")
                     .c_str());
  }
  return medians;
}

// One eager run of `run(r)` per runner, profiled (--profile): the table of
// where the time went against each runner's timed `ms`.
template <typename Run>
absl::StatusOr<std::string> ProfileEach(ProfilingBackend& profiler,
                                        std::vector<Runner>& runners, int reps,
                                        const std::vector<double>& ms,
                                        Run run) {
  std::vector<std::string> names;
  std::vector<StepProfile> profiles;
  for (Runner& r : runners) {
    absl::Status s = profiler.Start();
    for (int k = 0; s.ok() && k < reps; ++k) s = run(r);
    absl::StatusOr<StepProfile> p = profiler.Stop();
    if (!s.ok()) return s;
    if (!p.ok()) return p.status();
    names.push_back(r.name);
    profiles.push_back(p->PerStep(reps));
  }
  return StepProfileTable(names, profiles, ms);
}

// The device's memory read bandwidth in GB/s, measured now.
absl::StatusOr<double> ReadBandwidthGBps(const Backend& backend,
                                         const CpuKernelOptions& cpu) {
#if defined(OCTET_HAVE_CUDA)
  if (backend.kind() == DeviceKind::kCuda) {
    return bench::CudaReadBandwidthGBps(size_t{4} << 30, 5);
  }
#endif
  (void)backend;
  return bench::CpuReadBandwidthGBps(size_t{256} << 20,
                                     cpu_internal::ThreadCount(cpu), 5);
}

// "roofline (...): none 3.37 ms = 65% reached, fp8 ..." for one batch size.
void PrintRoofline(const std::vector<Runner>& runners,
                   const std::vector<double>& ms, double gbps) {
  std::printf(
      "roofline (the weights a step reads, read once, at %.0f GB/s, "
      "measured now):",
      gbps);
  for (size_t i = 0; i < runners.size(); ++i) {
    const double roof_ms = runners[i].model->StepWeightBytes() / (gbps * 1e6);
    std::printf("%s %s %.2f ms = %.0f%% reached", i == 0 ? "" : ",",
                runners[i].name, roof_ms, 100.0 * roof_ms / ms[i]);
  }
  std::printf("\n");
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "decode speed, unquantized vs FP8, side by side");
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_model);
  const int steps = absl::GetFlag(FLAGS_steps),
            prompt = absl::GetFlag(FLAGS_prompt_tokens),
            threads = absl::GetFlag(FLAGS_threads),
            profile_steps =
                absl::GetFlag(FLAGS_profile) ? absl::GetFlag(FLAGS_profile_steps)
                                             : 0;
  std::vector<int> batches;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_batch), ',')) {
    int b = 0;
    if (!absl::SimpleAtoi(part, &b) || b < 1 || b > 4096) {
      batches.clear();
      break;
    }
    batches.push_back(b);
  }
  if (dir.empty() || steps < 1 || prompt < 1 || batches.empty() ||
      threads < 0 || profile_steps < 0 || absl::GetFlag(FLAGS_prefill_reps) < 0 ||
      (absl::GetFlag(FLAGS_profile) && profile_steps < 1)) {
    std::fprintf(stderr,
                 "bench_decode: needs --model DIR, positive --steps, "
                 "--prompt_tokens and --profile_steps, and --batch sizes in "
                 "[1, 4096]\n");
    return 2;
  }
  const CpuKernelOptions cpu{.isa = CpuIsa::kAuto,
                             .num_threads = threads,
                             .panels = absl::GetFlag(FLAGS_cpu_panels)};
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      NewBackend(absl::GetFlag(FLAGS_device), cpu);
  if (!backend.ok()) return Fail(backend.status());
  // With --profile the models run on a ProfilingBackend, which passes every
  // operation through untimed until a profile starts.
  std::unique_ptr<ProfilingBackend> profiler;
  Backend* model_backend = backend->get();
  if (profile_steps > 0) {
    profiler = std::make_unique<ProfilingBackend>(**backend);
    model_backend = profiler.get();
  }
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return Fail(ckpt.status());
  const ModelConfig& c = (*ckpt)->config();
  const int64_t tokens = prompt + steps + profile_steps + 1;
  if (tokens > c.max_position_embeddings) {
    return Fail(
        absl::InvalidArgumentError("prompt + steps exceed the context"));
  }
  std::vector<Runner> runners(absl::GetFlag(FLAGS_quantize_lm_head) ? 3 : 2);
  runners[0].name = "none";
  runners[1].name = "fp8";
  if (runners.size() > 2) runners[2].name = "fp8+head";
  std::vector<double> load_s(runners.size());
  for (size_t i = 0; i < runners.size(); ++i) {
    ModelOptions o;
    o.method = i == 0 ? LinearMethod::kNone : LinearMethod::kFp8;
    o.quantize_lm_head = i == 2;
    o.cpu = cpu;
    o.graph_max_batch = absl::GetFlag(FLAGS_graph_max_batch);
    const auto t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<LlamaModel>> m =
        LlamaModel::Load(**ckpt, *model_backend, o);
    if (!m.ok()) return Fail(m.status());
    if (profiler != nullptr) profiler->NameProjections(**m);
    load_s[i] = SecondsSince(t0);
    runners[i].model = *std::move(m);
  }
  std::fprintf(stderr, "bench_decode: %s on %s, weights", dir.c_str(),
               (*backend)->Describe().c_str());
  for (size_t i = 0; i < runners.size(); ++i) {
    std::fprintf(stderr, "%s %s %.2f GiB (loaded in %.1f s)", i == 0 ? "" : ",",
                 runners[i].name,
                 runners[i].model->WeightBytes() / double(1 << 30), load_s[i]);
  }
  std::fprintf(stderr, "\n");
  const absl::StatusOr<double> gbps = ReadBandwidthGBps(**backend, cpu);
  if (!gbps.ok()) {
    std::fprintf(stderr, "bench_decode: no roofline: %s\n",
                 std::string(gbps.status().message()).c_str());
  }
  // Each step ends as serving's does: greedy tokens chosen on the device,
  // only their ids copied back.
  std::vector<SampledToken> sampled;
  int batch = 0;
  auto step = [&](Runner& r, int64_t count) -> absl::Status {
    std::vector<SequenceStep> seqs;
    for (int b = 0; b < batch; ++b) {
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < count; ++t) {
        ids.push_back(static_cast<int32_t>((r.position + t) * 7 + b * 131) %
                      c.vocab_size);
      }
      seqs.push_back({ids, r.position, &r.tables[b]});
    }
    std::vector<SampleRow> rows(batch);
    for (int b = 0; b < batch; ++b) {
      rows[b] = {.logits_row = b, .params = {.temperature = 0.0f}};
    }
    absl::Status s = r.model->ForwardSample(seqs, *r.cache, rows, &sampled);
    r.position += count;
    return s;
  };
  std::vector<Result> results;
  const int prefill_reps = absl::GetFlag(FLAGS_prefill_reps);
  for (const int b : batches) {
    batch = b;
    if (prefill_reps > 0) {
      absl::StatusOr<std::vector<double>> ms =
          TimePrefills(runners, prefill_reps, prompt, batch, tokens,
                       [&](Runner& r) { return step(r, prompt); });
      if (!ms.ok()) return Fail(ms.status());
      if (profiler != nullptr) {
        for (Runner& r : runners) {  // fresh caches, outside the profile
          absl::Status s = NewCache(r, batch, tokens);
          if (!s.ok()) return Fail(s);
        }
        absl::StatusOr<std::string> table =
            ProfileEach(*profiler, runners, 1, *ms,
                        [&](Runner& r) { return step(r, prompt); });
        if (!table.ok()) return Fail(table.status());
        std::printf(
            "profile of the prefill (%d x %d tokens): one eager prefill each, "
            "a clock mark around every operation; shares of the median "
            "prefill\n%s",
            batch, prompt, table->c_str());
      }
    }
    for (Runner& r : runners) {
      absl::Status s = NewCache(r, batch, tokens);
      if (s.ok()) s = step(r, prompt);  // prefill
      if (!s.ok()) return Fail(s);
    }
    for (int s = 0; s < steps; ++s) {
      for (Runner& r : runners) {
        const auto t0 = Clock::now();
        absl::Status st = step(r, 1);
        if (!st.ok()) return Fail(st);
        r.step_ms.push_back(SecondsSince(t0) * 1e3);
      }
    }
    Result got{batch, {}};
    for (const Runner& r : runners) got.ms.push_back(Median(r.step_ms));
    results.push_back(got);
    if (batches.size() > 1) std::printf("batch %d:\n", batch);
    for (const Runner& r : runners) {
      const double ms = Median(r.step_ms);
      std::printf(
          "%-5s median %.2f ms per step (%d sequences) = %.2f tokens/s\n",
          r.name, ms, batch, batch * 1e3 / ms);
    }
    for (size_t i = 1; i < runners.size(); ++i) {
      std::printf("%s decode speedup over none: %.2fx (batch %d)\n",
                  runners[i].name, got.ms[0] / got.ms[i], batch);
    }
    if (gbps.ok()) PrintRoofline(runners, got.ms, *gbps);
    if (profiler != nullptr) {
      absl::StatusOr<std::string> table =
          ProfileEach(*profiler, runners, profile_steps, got.ms,
                      [&](Runner& r) { return step(r, 1); });
      if (!table.ok()) return Fail(table.status());
      std::printf(
          "profile of batch %d: %d eager steps each, a clock mark around "
          "every operation; shares of the timed step\n%s",
          batch, profile_steps, table->c_str());
    }
    std::fflush(stdout);
  }
  for (Runner& r : runners) {
    r.tables.clear();
    r.cache.reset();
  }
  if (results.size() > 1) {
    // batch, then per runner ms/step and tokens/s, then each over none.
    std::printf("\n%6s", "batch");
    for (const Runner& r : runners) {
      std::printf(" %16s %16s", absl::StrCat(r.name, "_ms/step").c_str(),
                  absl::StrCat(r.name, "_tok/s").c_str());
    }
    for (size_t i = 1; i < runners.size(); ++i) {
      std::printf(" %14s", absl::StrCat(runners[i].name, "/none").c_str());
    }
    std::printf("\n");
    for (const Result& r : results) {
      std::printf("%6d", r.batch);
      for (double ms : r.ms) {
        std::printf(" %16.2f %16.1f", ms, r.batch * 1e3 / ms);
      }
      for (size_t i = 1; i < r.ms.size(); ++i) {
        std::printf(" %13.2fx", r.ms[0] / r.ms[i]);
      }
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) { return octet::Main(argc, argv); }
