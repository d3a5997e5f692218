// bench_decode: decode speed of one checkpoint with unquantized vs FP8
// linear layers, measured side by side in one process: both models are
// loaded, prefilled with the same prompt, then decode steps alternate
// between them (A B A B ...) so that a noisy or drifting machine affects
// both alike. Prints each one's median ms per token and the speedup.
//
//   bench_decode --model DIR [--device auto|cpu|cuda] [--steps 32]
//                [--prompt_tokens 16] [--batch 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "worker/backends.h"
#include "model/checkpoint.h"
#include "worker/llama_model.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda");
ABSL_FLAG(int32_t, steps, 32, "timed decode steps per model");
ABSL_FLAG(int32_t, prompt_tokens, 16, "prompt length before decoding");
ABSL_FLAG(int32_t, batch, 1, "sequences decoded together");
ABSL_FLAG(int32_t, threads, 0, "CPU threads; 0 = one per core");

namespace octet {
namespace {

using Clock = std::chrono::steady_clock;

struct Runner {
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> cache;
  std::vector<std::vector<int32_t>> tables;
  std::vector<double> step_ms;
  int64_t position = 0;
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "bench_decode: %s\n", std::string(s.message()).c_str());
  return 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "decode speed, unquantized vs FP8, side by side");
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_model);
  const int steps = absl::GetFlag(FLAGS_steps),
            prompt = absl::GetFlag(FLAGS_prompt_tokens),
            batch = absl::GetFlag(FLAGS_batch),
            threads = absl::GetFlag(FLAGS_threads);
  if (dir.empty() || steps < 1 || prompt < 1 || batch < 1 || threads < 0) {
    std::fprintf(stderr,
                 "bench_decode: needs --model DIR and positive --steps, "
                 "--prompt_tokens, --batch\n");
    return 2;
  }
  const CpuKernelOptions cpu{.isa = CpuIsa::kAuto, .num_threads = threads};
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      NewBackend(absl::GetFlag(FLAGS_device), cpu);
  if (!backend.ok()) return Fail(backend.status());
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) return Fail(ckpt.status());
  const ModelConfig& c = (*ckpt)->config();
  if (prompt + steps + 1 > c.max_position_embeddings) {
    return Fail(
        absl::InvalidArgumentError("prompt + steps exceed the context"));
  }
  Runner runners[2];
  const char* names[2] = {"none", "fp8"};
  for (int i = 0; i < 2; ++i) {
    ModelOptions o;
    o.method = i == 0 ? LinearMethod::kNone : LinearMethod::kFp8;
    o.cpu = cpu;
    absl::StatusOr<std::unique_ptr<LlamaModel>> m =
        LlamaModel::Load(**ckpt, **backend, o);
    if (!m.ok()) return Fail(m.status());
    runners[i].model = *std::move(m);
    const int64_t blocks = batch * ((prompt + steps + 1 + 15) / 16);
    absl::StatusOr<std::unique_ptr<KvCache>> cache =
        runners[i].model->NewKvCache({.block_size = 16, .num_blocks = blocks});
    if (!cache.ok()) return Fail(cache.status());
    runners[i].cache = *std::move(cache);
    runners[i].tables.resize(batch);
    for (auto& t : runners[i].tables) {
      absl::Status s = runners[i].cache->Reserve(prompt + steps + 1, &t);
      if (!s.ok()) return Fail(s);
    }
  }
  std::fprintf(stderr,
               "bench_decode: %s on %s, weights none %.2f GiB, fp8 %.2f GiB\n",
               dir.c_str(), (*backend)->Describe().c_str(),
               runners[0].model->WeightBytes() / double(1 << 30),
               runners[1].model->WeightBytes() / double(1 << 30));
  std::vector<float> logits;
  auto step = [&](Runner& r, int64_t count) -> absl::Status {
    std::vector<SequenceStep> seqs;
    for (int b = 0; b < batch; ++b) {
      std::vector<int32_t> tokens;
      for (int64_t t = 0; t < count; ++t) {
        tokens.push_back(static_cast<int32_t>((r.position + t) * 7 + b * 131) %
                         c.vocab_size);
      }
      seqs.push_back({tokens, r.position, &r.tables[b]});
    }
    absl::Status s = r.model->Forward(seqs, *r.cache, &logits);
    r.position += count;
    return s;
  };
  for (Runner& r : runners) {
    absl::Status s = step(r, prompt);  // prefill
    if (!s.ok()) return Fail(s);
  }
  for (int s = 0; s < steps; ++s) {
    for (Runner& r : runners) {
      const auto t0 = Clock::now();
      absl::Status st = step(r, 1);
      if (!st.ok()) return Fail(st);
      r.step_ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  const double none = Median(runners[0].step_ms),
               fp8 = Median(runners[1].step_ms);
  for (int i = 0; i < 2; ++i) {
    const double ms = Median(runners[i].step_ms);
    std::printf("%-5s median %.2f ms per step (%d sequences) = %.2f tokens/s\n",
                names[i], ms, batch, batch * 1e3 / ms);
  }
  std::printf("fp8 decode speedup over none: %.2fx\n", none / fp8);
  return 0;
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) { return octet::Main(argc, argv); }
