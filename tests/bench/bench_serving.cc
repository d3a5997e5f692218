// bench_serving: the serving benchmark octet's idea started from (vLLM's
// FP8 measurements): requests arriving as a Poisson process at --rate per
// second, --prompt_tokens random prompt tokens each, --output_tokens
// generated (EOS ignored), streamed from a real `coordinator` (started here,
// one per configuration, all up at once). The load runs on each
// configuration in turn, --rounds times, in ABBA order, so that the
// machine's drift (other tenants, steal time) is shared. Prints time to
// first token and inter-token latency (mean, p50, p99) and output
// throughput for FP8 and unquantized at each TP degree, side by side, with
// the FP8 ratios over all rounds and per round. --device goes to the
// coordinators (--device=cuda: the workers run on the GPU).
//
//   bench_serving --model DIR [--tp 1,2] [--requests 50] [--rate 1]
//                 [--prompt_tokens 512] [--output_tokens 128] [--rounds 1]
//                 [--device auto|cpu|cuda]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "octet/v1/generation.grpc.pb.h"
#include "tests/process_util.h"

ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(std::string, tp, "1,2", "TP degrees to compare");
ABSL_FLAG(int32_t, requests, 50, "requests per configuration");
ABSL_FLAG(double, rate, 1.0, "mean arrivals per second (Poisson)");
ABSL_FLAG(int32_t, prompt_tokens, 512, "prompt length");
ABSL_FLAG(int32_t, output_tokens, 128, "tokens generated per request");
ABSL_FLAG(int32_t, threads, 0, "CPU threads per worker; 0: cores / tp");
ABSL_FLAG(uint64_t, seed, 1, "arrival times and prompts");
ABSL_FLAG(int32_t, rounds, 1,
          "times the load runs on each configuration, interleaved");
ABSL_FLAG(std::string, device, "auto",
          "the coordinators' --device: auto, cpu or cuda");

namespace octet {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

struct Stats {
  double mean = 0, p50 = 0, p99 = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
  return s;
}

// What one load run measured (rounds add up).
struct Samples {
  std::vector<double> ttft, itl;  // ms
  int64_t generated = 0;
  double seconds = 0;  // first arrival to last answer
  int ok = 0, failed = 0;
  void Add(const Samples& o) {
    ttft.insert(ttft.end(), o.ttft.begin(), o.ttft.end());
    itl.insert(itl.end(), o.itl.begin(), o.itl.end());
    generated += o.generated;
    seconds += o.seconds;
    ok += o.ok;
    failed += o.failed;
  }
  double TokensPerSecond() const { return generated / std::max(1e-9, seconds); }
};

// One configuration's coordinator, started once and kept for every round.
struct Server {
  std::string quantization;
  int tp = 1;
  std::string name;
  std::unique_ptr<testing::Child> process;
  std::unique_ptr<v1::Generation::Stub> stub;
  v1::ModelInfo info;
  Samples total;
  std::vector<double> round_ttft, round_itl, round_tps;  // per round means
};

bool StartServer(Server& s) {
  s.name = absl::StrCat(s.quantization, " TP=", s.tp);
  const int port = testing::FreeTcpPort();
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads == 0) {
    threads = std::max(
        1, static_cast<int>(std::thread::hardware_concurrency()) / s.tp);
  }
  const int64_t context =
      absl::GetFlag(FLAGS_prompt_tokens) + absl::GetFlag(FLAGS_output_tokens);
  s.process = std::make_unique<testing::Child>(std::vector<std::string>{
      testing::SiblingProgram("coordinator"),
      "--model=" + absl::GetFlag(FLAGS_model), absl::StrCat("--tp=", s.tp),
      "--quantization=" + s.quantization, absl::StrCat("--port=", port),
      "--device=" + absl::GetFlag(FLAGS_device),
      absl::StrCat("--threads=", threads),
      absl::StrCat("--kv_cache_tokens=",
                   std::max<int64_t>(16384, context * 16)),
      absl::StrCat("--max_tokens_per_step=", std::max<int64_t>(2048, context))});
  s.stub = v1::Generation::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  for (;;) {
    grpc::ClientContext c;
    if (s.stub->GetModelInfo(&c, {}, &s.info).ok()) return true;
    if (absl::Now() > deadline || s.process->Wait(absl::ZeroDuration()) >= 0) {
      std::fprintf(stderr, "bench_serving: %s did not start\n", s.name.c_str());
      return false;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

// Sends `requests` at `arrival` seconds from now, each on its own stream.
Samples RunLoad(v1::Generation::Stub& stub,
                const std::vector<v1::GenerateRequest>& requests,
                const std::vector<double>& arrival) {
  const int n = static_cast<int>(requests.size());
  std::vector<double> ttft(n, -1);
  std::vector<std::vector<double>> itl(n);
  std::vector<int> tokens(n, 0);
  std::vector<bool> ok(n, false);
  const Clock::time_point start = Clock::now();
  std::vector<Clock::time_point> ends(n, start);
  std::vector<std::thread> clients;
  for (int i = 0; i < n; ++i) {
    clients.emplace_back([&, i] {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(arrival[i])));
      const Clock::time_point sent = Clock::now();
      grpc::ClientContext c;
      c.set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
      auto reader = stub.GenerateStream(&c, requests[i]);
      v1::GenerateStreamResponse m;
      Clock::time_point last = sent;
      while (reader->Read(&m)) {
        const int k = m.token_ids_size();
        if (k == 0) continue;
        const Clock::time_point now = Clock::now();
        if (tokens[i] == 0) {
          ttft[i] = Ms(now - sent);
        } else {
          for (int j = 0; j < k; ++j) itl[i].push_back(Ms(now - last) / k);
        }
        tokens[i] += k;
        last = now;
      }
      ok[i] = reader->Finish().ok();
      ends[i] = Clock::now();
    });
  }
  for (std::thread& c : clients) c.join();
  Samples out;
  Clock::time_point end = start;
  for (int i = 0; i < n; ++i) {
    if (!ok[i]) {
      ++out.failed;
      continue;
    }
    ++out.ok;
    out.ttft.push_back(ttft[i]);
    out.itl.insert(out.itl.end(), itl[i].begin(), itl[i].end());
    out.generated += tokens[i];
    end = std::max(end, ends[i]);
  }
  out.seconds = Ms(end - start) / 1e3;
  return out;
}

std::string Join(const std::vector<double>& v, const char* format) {
  std::string out;
  for (double x : v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), format, x);
    absl::StrAppend(&out, out.empty() ? "" : " ", buf);
  }
  return out;
}

int Main() {
  if (absl::GetFlag(FLAGS_model).empty() || absl::GetFlag(FLAGS_requests) < 1 ||
      absl::GetFlag(FLAGS_rate) <= 0 ||
      absl::GetFlag(FLAGS_prompt_tokens) < 1 ||
      absl::GetFlag(FLAGS_output_tokens) < 1 ||
      absl::GetFlag(FLAGS_rounds) < 1) {
    std::fprintf(stderr,
                 "bench_serving: needs --model DIR and positive --requests, "
                 "--rate, --prompt_tokens, --output_tokens, --rounds\n");
    return 2;
  }
  std::vector<int> tps;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_tp), ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 1) {
      std::fprintf(stderr, "bench_serving: bad --tp '%s'\n",
                   std::string(s).c_str());
      return 2;
    }
    tps.push_back(v);
  }
  // Every configuration up at once (one after another, so that their loads
  // do not compete), then the same load on each in turn, round by round.
  std::vector<std::unique_ptr<Server>> servers;
  for (int tp : tps) {
    for (const char* q : {"none", "fp8"}) {
      servers.push_back(std::make_unique<Server>());
      servers.back()->quantization = q;
      servers.back()->tp = tp;
      if (!StartServer(*servers.back())) return 1;
    }
  }
  // The same arrivals and prompts for every configuration and round.
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::exponential_distribution<double> gap(absl::GetFlag(FLAGS_rate));
  std::uniform_int_distribution<int32_t> token(
      3, static_cast<int32_t>(servers[0]->info.vocab_size()) - 1);
  const int n = absl::GetFlag(FLAGS_requests);
  std::vector<double> arrival(n);
  std::vector<v1::GenerateRequest> requests(n);
  double t = 0;
  for (int i = 0; i < n; ++i) {
    arrival[i] = t;
    t += gap(rng);
    auto* ids = requests[i].mutable_token_ids();
    ids->add_ids(1);
    for (int k = 1; k < absl::GetFlag(FLAGS_prompt_tokens); ++k) {
      ids->add_ids(token(rng));
    }
    requests[i].mutable_sampling()->set_temperature(0.0f);
    requests[i].mutable_stopping()->set_max_new_tokens(
        absl::GetFlag(FLAGS_output_tokens));
    requests[i].mutable_stopping()->set_ignore_eos(true);
  }
  const int rounds = absl::GetFlag(FLAGS_rounds);
  std::printf(
      "bench_serving: %s on device %s, %d requests at %.2f/s (Poisson), %d "
      "prompt + %d output tokens each, %d round(s), configurations "
      "interleaved\n",
      absl::GetFlag(FLAGS_model).c_str(), absl::GetFlag(FLAGS_device).c_str(),
      n, absl::GetFlag(FLAGS_rate), absl::GetFlag(FLAGS_prompt_tokens),
      absl::GetFlag(FLAGS_output_tokens), rounds);
  // A warm-up request each (first touches of memory), not counted.
  for (auto& s : servers) {
    v1::GenerateRequest warm = requests[0];
    warm.mutable_stopping()->set_max_new_tokens(2);
    RunLoad(*s->stub, {warm}, {0.0});
  }
  for (int round = 0; round < rounds; ++round) {
    // Forward on even rounds, backward on odd ones (ABBA), so that a drift
    // in the machine's speed does not favour one configuration.
    for (size_t k = 0; k < servers.size(); ++k) {
      Server& s = *servers[round % 2 == 0 ? k : servers.size() - 1 - k];
      const Samples got = RunLoad(*s.stub, requests, arrival);
      s.total.Add(got);
      s.round_ttft.push_back(Summarize(got.ttft).mean);
      s.round_itl.push_back(Summarize(got.itl).mean);
      s.round_tps.push_back(got.TokensPerSecond());
      std::printf(
          "  round %d %-10s ok %d/%d TTFT mean %.1f ms, ITL mean %.2f "
          "ms, %.2f tok/s\n",
          round + 1, s.name.c_str(), got.ok, n, s.round_ttft.back(),
          s.round_itl.back(), s.round_tps.back());
      std::fflush(stdout);
    }
  }
  std::printf("\n%-12s %9s %28s %28s %10s\n", "config", "ok",
              "TTFT ms mean/p50/p99", "ITL ms mean/p50/p99", "tok/s");
  for (const auto& s : servers) {
    const Stats ttft = Summarize(s->total.ttft), itl = Summarize(s->total.itl);
    std::printf("%-12s %4d/%-4d %9.1f/%8.1f/%9.1f %9.2f/%8.2f/%9.2f %10.2f\n",
                s->name.c_str(), s->total.ok, n * rounds, ttft.mean, ttft.p50,
                ttft.p99, itl.mean, itl.p50, itl.p99,
                s->total.TokensPerSecond());
  }
  for (size_t k = 0; k + 1 < servers.size(); k += 2) {
    const Server& none = *servers[k];
    const Server& fp8 = *servers[k + 1];
    auto ratios = [](const std::vector<double>& a,
                     const std::vector<double>& b) {
      std::vector<double> r;
      for (size_t i = 0; i < a.size(); ++i)
        r.push_back(a[i] / std::max(1e-9, b[i]));
      return r;
    };
    std::printf(
        "  TP=%d FP8 speedup over none (none / fp8 for latencies), all rounds: "
        "TTFT mean %.2fx, ITL mean %.2fx, throughput %.2fx\n"
        "    per round: TTFT %s; ITL %s; throughput %s\n",
        fp8.tp,
        Summarize(none.total.ttft).mean /
            std::max(1e-9, Summarize(fp8.total.ttft).mean),
        Summarize(none.total.itl).mean /
            std::max(1e-9, Summarize(fp8.total.itl).mean),
        fp8.total.TokensPerSecond() /
            std::max(1e-9, none.total.TokensPerSecond()),
        Join(ratios(none.round_ttft, fp8.round_ttft), "%.2fx").c_str(),
        Join(ratios(none.round_itl, fp8.round_itl), "%.2fx").c_str(),
        Join(ratios(fp8.round_tps, none.round_tps), "%.2fx").c_str());
  }
  for (auto& s : servers) s->process->Kill(SIGTERM);
  int failed = 0;
  for (const auto& s : servers) failed += s->total.failed;
  if (failed > 0) {
    std::fprintf(stderr, "bench_serving: %d request(s) failed\n", failed);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "serving latency and throughput, FP8 vs unquantized, per TP degree");
  absl::ParseCommandLine(argc, argv);
  return octet::Main();
}
