// bench_tp: tensor parallelism on the CPU, over Gloo (loopback TCP) and
// over shared memory.
//
//   bench_tp --model DIR --tp 2 [--steps 32] [--quantization fp8]
//            [--transports gloo,shm]
//
// Starts a rendezvous store and one process per rank (this program again,
// with --rank), first for TP = 1 and then for TP = --tp over each transport
// in turn, each process with
// --threads_per_rank CPU threads (default: the cores divided by the ranks).
// Rank 0 of each group prints:
//   - the latency of a 1-float all-reduce (MAX: the FP8 absmax sync) and of
//     a hidden-size all-reduce (SUM: a row-parallel output), median of 200;
//   - decode: median ms per step of one sequence (after a 16-token prefill),
//     with steps alternating between the FP8 absmax all-reduce on and off:
//     the difference is the sync's cost, given as a share of the step (and
//     the time spent inside it, which includes waiting for the slower rank).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kernels/cpu/backend.h"
#include "parallel/communicator.h"
#include "rpc/store.h"
#include "tests/process_util.h"
#include "model/checkpoint.h"
#include "worker/llama_model.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(int32_t, tp, 2, "tensor-parallel degree to compare with TP=1");
ABSL_FLAG(int32_t, steps, 32, "timed decode steps");
ABSL_FLAG(std::string, quantization, "fp8", "none or fp8");
ABSL_FLAG(int32_t, threads_per_rank, 0, "CPU threads per rank; 0 = cores/tp");
ABSL_FLAG(std::string, transports, "gloo,shm",
          "collectives between the ranks at TP > 1, each run in turn: gloo "
          "(loopback TCP), shm (shared memory)");
ABSL_FLAG(std::string, transport, "", "internal: this group's transport");
// Set by the parent for the rank processes.
ABSL_FLAG(int32_t, rank, -1, "internal: this process's rank");
ABSL_FLAG(int32_t, size, 0, "internal: ranks in the group");
ABSL_FLAG(std::string, store, "", "internal: rendezvous address");

namespace octet {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since)
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times the max all-reduces that pass through it (the FP8 absmax sync; the
// sum all-reduces of row-parallel outputs are not counted).
class TimingCommunicator : public Communicator {
 public:
  explicit TimingCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string Describe() const override { return inner_.Describe(); }
  absl::Status AllReduceSum(float* d, int64_t n) override {
    return inner_.AllReduceSum(d, n);
  }
  absl::Status AllReduceMax(float* d, int64_t n) override {
    const auto t0 = Clock::now();
    absl::Status s = inner_.AllReduceMax(d, n);
    max_ms += Ms(t0);
    return s;
  }
  absl::Status AllGather(const float* in, int64_t n, float* out) override {
    return inner_.AllGather(in, n, out);
  }
  absl::Status Broadcast(void* d, int64_t bytes, int root) override {
    return inner_.Broadcast(d, bytes, root);
  }
  absl::Status Barrier() override { return inner_.Barrier(); }
  double max_ms = 0;

 private:
  Communicator& inner_;
};

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "bench_tp rank %d: %s\n", absl::GetFlag(FLAGS_rank),
               s.ToString().c_str());
  return 1;
}

int Rank() {
  const int rank = absl::GetFlag(FLAGS_rank), size = absl::GetFlag(FLAGS_size);
  std::unique_ptr<Communicator> comm;
  if (size == 1) {
    comm = NewSingleRankCommunicator();
  } else {
    GrpcStore store(absl::GetFlag(FLAGS_store));
    auto c =
        NewCpuCommunicator(store, rank, size, absl::GetFlag(FLAGS_transport),
                           absl::StrCat("bench-", size), absl::Seconds(60));
    if (!c.ok()) return Fail(c.status());
    comm = *std::move(c);
  }
  auto ckpt = Checkpoint::Open(absl::GetFlag(FLAGS_model));
  if (!ckpt.ok()) return Fail(ckpt.status());
  const ModelConfig& c = (*ckpt)->config();

  // Collective latency.
  std::vector<double> one_ms, hidden_ms;
  std::vector<float> hidden(c.hidden_size, 1.0f);
  for (int i = 0; i < 220; ++i) {
    float x = rank;
    auto t0 = Clock::now();
    absl::Status s = comm->AllReduceMax(&x, 1);
    if (i >= 20) one_ms.push_back(Ms(t0));
    t0 = Clock::now();
    if (s.ok()) s = comm->AllReduceSum(hidden.data(), hidden.size());
    if (i >= 20) hidden_ms.push_back(Ms(t0));
    if (!s.ok()) return Fail(s);
  }

  const int threads = absl::GetFlag(FLAGS_threads_per_rank);
  auto backend = NewCpuBackend({.isa = CpuIsa::kAuto, .num_threads = threads});
  TimingCommunicator timed(*comm);
  ModelOptions options;
  options.method = absl::GetFlag(FLAGS_quantization) == "fp8"
                       ? LinearMethod::kFp8
                       : LinearMethod::kNone;
  options.cpu = {.isa = CpuIsa::kAuto, .num_threads = threads};
  options.comm = &timed;
  auto model = LlamaModel::Load(**ckpt, *backend, options);
  if (!model.ok()) return Fail(model.status());
  const int steps = absl::GetFlag(FLAGS_steps), prompt = 16;
  auto cache = (*model)->NewKvCache(
      {.block_size = 16, .num_blocks = (prompt + 2 * steps + 16) / 16 + 1});
  if (!cache.ok()) return Fail(cache.status());
  std::vector<int32_t> table;
  absl::Status s = (*cache)->Reserve(prompt + 2 * steps + 1, &table);
  if (!s.ok()) return Fail(s);
  std::vector<float> logits;
  std::vector<int32_t> tokens(prompt);
  for (int i = 0; i < prompt; ++i) tokens[i] = (i * 7 + 3) % c.vocab_size;
  SequenceStep step{tokens, 0, &table};
  s = (*model)->Forward({&step, 1}, **cache, &logits);
  // Steps alternate between the absmax all-reduce on and off (every rank
  // switches at the same step), so that noise hits both alike.
  std::vector<double> step_ms, off_ms, sync_ms;
  for (int i = 0; i < 2 * steps && s.ok(); ++i) {
    const bool sync = i % 2 == 0;
    (*model)->set_sync_activation_absmax(sync);
    step = {{static_cast<int32_t>((i * 13 + 5) % c.vocab_size)},
            prompt + i,
            &table};
    timed.max_ms = 0;
    const auto t0 = Clock::now();
    s = (*model)->Forward({&step, 1}, **cache, &logits);
    (sync ? step_ms : off_ms).push_back(Ms(t0));
    if (sync) sync_ms.push_back(timed.max_ms);
  }
  if (!s.ok()) return Fail(s);
  if (rank == 0) {
    const double ms = Median(step_ms), off = Median(off_ms),
                 in_sync = Median(sync_ms);
    std::printf(
        "TP=%d %s (%s, %d threads/rank): all-reduce 1 float %.1f us, %lld "
        "floats %.1f us; decode %.2f ms/step = %.2f tokens/s; without the "
        "absmax all-reduce %.2f ms/step, so it costs %.1f%% of the step "
        "(time inside it, waits for the slower rank included: %.2f ms)\n",
        size, size == 1 ? "" : absl::GetFlag(FLAGS_transport).c_str(),
        absl::GetFlag(FLAGS_quantization).c_str(),
        threads == 0 ? static_cast<int>(std::thread::hardware_concurrency())
                     : threads,
        Median(one_ms) * 1e3, static_cast<long long>(c.hidden_size),
        Median(hidden_ms) * 1e3, ms, 1e3 / ms, off, 100.0 * (ms - off) / ms,
        in_sync);
  }
  return 0;
}

int Parent() {
  const int tp = absl::GetFlag(FLAGS_tp);
  if (absl::GetFlag(FLAGS_model).empty() || tp < 2 ||
      absl::GetFlag(FLAGS_steps) < 1) {
    std::fprintf(stderr, "bench_tp: needs --model DIR, --tp >= 2, --steps\n");
    return 2;
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<std::pair<int, std::string>> groups = {{1, ""}};
  for (absl::string_view t :
       absl::StrSplit(absl::GetFlag(FLAGS_transports), ',')) {
    if (t != "gloo" && t != "shm") {
      std::fprintf(stderr, "bench_tp: unknown transport '%s' (gloo, shm)\n",
                   std::string(t).c_str());
      return 2;
    }
    groups.push_back({tp, std::string(t)});
  }
  for (const auto& [size, transport] : groups) {
    InMemoryStore store;
    auto server = RendezvousServer::Start("127.0.0.1:0", &store);
    if (!server.ok()) return Fail(server.status());
    int threads = absl::GetFlag(FLAGS_threads_per_rank);
    if (threads == 0) threads = std::max(1, cores / size);
    std::vector<std::vector<std::string>> commands;
    for (int r = 0; r < size; ++r) {
      commands.push_back(
          {testing::SiblingProgram("bench_tp"),
           "--model=" + absl::GetFlag(FLAGS_model),
           absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
           "--quantization=" + absl::GetFlag(FLAGS_quantization),
           absl::StrCat("--threads_per_rank=", threads),
           absl::StrCat("--rank=", r), absl::StrCat("--size=", size),
           "--transport=" + transport, "--store=" + (*server)->address()});
    }
    std::fflush(stdout);
    const std::vector<int> codes =
        testing::RunTogether(commands, absl::Minutes(30));
    for (int code : codes) {
      if (code != 0) {
        std::fprintf(stderr, "bench_tp: a rank of TP=%d ended with %d\n", size,
                     code);
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tensor-parallel collectives and decode, CPU");
  absl::ParseCommandLine(argc, argv);
  return absl::GetFlag(FLAGS_rank) >= 0 ? octet::Rank() : octet::Parent();
}
