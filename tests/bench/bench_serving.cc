// bench_serving: the serving benchmark octet's idea started from (vLLM's
// FP8 measurements): requests arriving as a Poisson process at --rate per
// second, --prompt_tokens random prompt tokens each, --output_tokens
// generated (EOS ignored), streamed from a real `coordinator` (started here,
// one per configuration). Prints time to first token and inter-token
// latency (mean, p50, p99) and output throughput for FP8 and unquantized
// at each TP degree, side by side, with the FP8 ratios.
//
//   bench_serving --model DIR [--tp 1,2] [--requests 50] [--rate 1]
//                 [--prompt_tokens 512] [--output_tokens 128]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
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

struct Result {
  std::string name;
  Stats ttft, itl;
  double tokens_per_second = 0;
  int ok = 0;
};

// One configuration: a coordinator, the load, its numbers.
Result Run(const std::string& quantization, int tp) {
  Result r;
  r.name = absl::StrCat(quantization, " TP=", tp);
  const int port = testing::FreeTcpPort();
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads == 0) {
    threads =
        std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / tp);
  }
  const int64_t context =
      absl::GetFlag(FLAGS_prompt_tokens) + absl::GetFlag(FLAGS_output_tokens);
  testing::Child server(
      {testing::SiblingProgram("coordinator"),
       "--model=" + absl::GetFlag(FLAGS_model), absl::StrCat("--tp=", tp),
       "--quantization=" + quantization, absl::StrCat("--port=", port),
       absl::StrCat("--threads=", threads),
       absl::StrCat("--kv_cache_tokens=",
                    std::max<int64_t>(16384, context * 16)),
       absl::StrCat("--max_batch_tokens=", std::max<int64_t>(2048, context))});
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Generation::NewStub(channel);
  v1::ModelInfo info;
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  for (;;) {
    grpc::ClientContext c;
    if (stub->GetModelInfo(&c, {}, &info).ok()) break;
    if (absl::Now() > deadline) {
      std::fprintf(stderr, "bench_serving: %s did not start\n", r.name.c_str());
      return r;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  // The same arrivals and prompts for every configuration.
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::exponential_distribution<double> gap(absl::GetFlag(FLAGS_rate));
  std::uniform_int_distribution<int32_t> token(3, info.vocab_size() - 1);
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
      auto reader = stub->GenerateStream(&c, requests[i]);
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
  std::vector<double> all_ttft, all_itl;
  int64_t generated = 0;
  Clock::time_point end = start;
  for (int i = 0; i < n; ++i) {
    if (!ok[i]) continue;
    ++r.ok;
    all_ttft.push_back(ttft[i]);
    all_itl.insert(all_itl.end(), itl[i].begin(), itl[i].end());
    generated += tokens[i];
    end = std::max(end, ends[i]);
  }
  r.ttft = Summarize(all_ttft);
  r.itl = Summarize(all_itl);
  r.tokens_per_second = generated / std::max(1e-9, Ms(end - start) / 1e3);
  server.Kill(SIGTERM);
  return r;
}

int Main() {
  if (absl::GetFlag(FLAGS_model).empty() || absl::GetFlag(FLAGS_requests) < 1 ||
      absl::GetFlag(FLAGS_rate) <= 0 ||
      absl::GetFlag(FLAGS_prompt_tokens) < 1 ||
      absl::GetFlag(FLAGS_output_tokens) < 1) {
    std::fprintf(stderr,
                 "bench_serving: needs --model DIR and positive --requests, "
                 "--rate, --prompt_tokens, --output_tokens\n");
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
  std::printf(
      "bench_serving: %s, %d requests at %.2f/s (Poisson), %d prompt + %d "
      "output tokens each\n\n",
      absl::GetFlag(FLAGS_model).c_str(), absl::GetFlag(FLAGS_requests),
      absl::GetFlag(FLAGS_rate), absl::GetFlag(FLAGS_prompt_tokens),
      absl::GetFlag(FLAGS_output_tokens));
  std::printf("%-12s %5s %28s %28s %10s\n", "config", "ok",
              "TTFT ms mean/p50/p99", "ITL ms mean/p50/p99", "tok/s");
  std::fflush(stdout);
  for (int tp : tps) {
    Result rs[2];
    int k = 0;
    for (const char* q : {"none", "fp8"}) {
      Result& r = rs[k++] = Run(q, tp);
      std::printf("%-12s %5d %9.1f/%8.1f/%9.1f %9.2f/%8.2f/%9.2f %10.2f\n",
                  r.name.c_str(), r.ok, r.ttft.mean, r.ttft.p50, r.ttft.p99,
                  r.itl.mean, r.itl.p50, r.itl.p99, r.tokens_per_second);
      std::fflush(stdout);
    }
    std::printf(
        "  TP=%d FP8 speedup over none (none / fp8 for latencies): TTFT "
        "mean %.2fx, ITL mean %.2fx, throughput %.2fx\n",
        tp, rs[0].ttft.mean / std::max(1e-9, rs[1].ttft.mean),
        rs[0].itl.mean / std::max(1e-9, rs[1].itl.mean),
        rs[1].tokens_per_second / std::max(1e-9, rs[0].tokens_per_second));
    std::fflush(stdout);
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
