#include "coordinator/metrics.h"

#include <vector>

namespace octet {
namespace {

using prometheus::Histogram;

prometheus::Gauge& NewGauge(prometheus::Registry& r, const std::string& name,
                            const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

prometheus::Counter& NewCounter(prometheus::Registry& r,
                                const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

Histogram& NewHistogram(prometheus::Registry& r, const std::string& name,
                        const std::string& help,
                        const Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(
      {}, buckets);
}

// Bucket bounds in seconds: from a fast GPU's milliseconds to a loaded
// CPU's seconds.
const Histogram::BucketBoundaries kLatencyBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.15, 0.2,
    0.3,   0.5,    0.75,  1.0,  2.5,  5.0,  10.0, 20.0, 40.0, 80.0};
const Histogram::BucketBoundaries kRequestBuckets = {
    0.05, 0.1,  0.25, 0.5,   1.0,   2.5,   5.0,   10.0,
    20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1280.0};

}  // namespace

std::string StatusCodeName(absl::StatusCode code) {
  return absl::StatusCodeToString(code);  // gRPC's names: INVALID_ARGUMENT
}

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("octet_requests_total")
                    .Help("Generation requests ended, by gRPC status code "
                          "and, for OK ones, finish reason")
                    .Register(*registry_)),
      waiting_(NewGauge(*registry_, "octet_requests_waiting",
                        "Requests queued, not yet running")),
      running_(NewGauge(*registry_, "octet_requests_running",
                        "Sequences in the running batch")),
      blocks_used_(NewGauge(*registry_, "octet_kv_blocks_used",
                            "KV-cache blocks held by sequences")),
      blocks_free_(
          NewGauge(*registry_, "octet_kv_blocks_free",
                   "KV-cache blocks not held by a sequence (cached ones "
                   "included)")),
      blocks_cached_(NewGauge(*registry_, "octet_prefix_cache_blocks",
                              "KV-cache blocks in the prefix cache (held or "
                              "not)")),
      hit_rate_(NewGauge(*registry_, "octet_prefix_cache_hit_rate",
                         "Prompt tokens found in the prefix cache over those "
                         "looked up, since the start")),
      prompt_tokens_(NewCounter(*registry_, "octet_prompt_tokens_total",
                                "Prompt tokens of requests that got their "
                                "first token (once per request)")),
      generation_tokens_(NewCounter(*registry_, "octet_generation_tokens_total",
                                    "Tokens generated")),
      preemptions_(NewCounter(*registry_, "octet_preemptions_total",
                              "Sequences preempted (recomputed later) for "
                              "want of KV-cache blocks")),
      group_failures_(NewCounter(*registry_,
                                 "octet_worker_group_failures_total",
                                 "Worker groups that failed or did not start "
                                 "(each is replaced)")),
      cache_queries_(NewCounter(*registry_, "octet_prefix_cache_queries_total",
                                "Prompt tokens looked up in the prefix cache "
                                "(prompts asking for their logprobs are "
                                "not)")),
      cache_hits_(NewCounter(*registry_, "octet_prefix_cache_hits_total",
                             "Prompt tokens found in the prefix cache")),
      ttft_(NewHistogram(*registry_, "octet_time_to_first_token_seconds",
                         "From a request's arrival to its first token",
                         kLatencyBuckets)),
      itl_(NewHistogram(*registry_, "octet_inter_token_latency_seconds",
                        "Between two tokens of one request", kLatencyBuckets)),
      e2e_(NewHistogram(*registry_, "octet_e2e_request_latency_seconds",
                        "From a request's arrival to its end, for every "
                        "request the engine took",
                        kRequestBuckets)) {
  // The common outcomes exist from the start (at 0), so that rates work
  // before the first one happens.
  for (const char* finish : {"length", "eos", "stop"}) {
    requests_.Add({{"code", "OK"}, {"finish_reason", finish}});
  }
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kCancelled,
        absl::StatusCode::kUnavailable}) {
    requests_.Add({{"code", StatusCodeName(code)}, {"finish_reason", "none"}});
  }
}

void Metrics::RequestEnded(absl::StatusCode code,
                           const std::string& finish_reason) {
  requests_
      .Add({{"code", StatusCodeName(code)}, {"finish_reason", finish_reason}})
      .Increment();
}

void Metrics::PrefixCacheLookups(int64_t queries, int64_t hits) {
  if (queries == 0) return;
  cache_queries_.Increment(static_cast<double>(queries));
  cache_hits_.Increment(static_cast<double>(hits));
  hit_rate_.Set(cache_hits_.Value() / cache_queries_.Value());
}

void Metrics::SetLoad(int64_t waiting, int64_t running, int64_t blocks_used,
                      int64_t blocks_free, int64_t blocks_cached) {
  blocks_cached_.Set(static_cast<double>(blocks_cached));
  waiting_.Set(static_cast<double>(waiting));
  running_.Set(static_cast<double>(running));
  blocks_used_.Set(static_cast<double>(blocks_used));
  blocks_free_.Set(static_cast<double>(blocks_free));
}

}  // namespace octet
