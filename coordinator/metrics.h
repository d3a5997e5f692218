// The coordinator's Prometheus metrics (prometheus-cpp), served at
// /metrics on --metrics_port:
//
//   octet_requests_total{code, finish_reason}   requests ended, by gRPC status
//                                               code and (for OK) why
//   octet_requests_waiting, octet_requests_running
//   octet_kv_blocks_used, octet_kv_blocks_free (cached ones not in use
//                                               count as free)
//   octet_prefix_cache_queries_total,          prompt tokens looked up in the
//   octet_prefix_cache_hits_total              prefix cache, and found
//   octet_prefix_cache_hit_rate                hits / queries so far
//   octet_prefix_cache_blocks                  blocks a request can find
//   octet_prompt_tokens_total, octet_generation_tokens_total
//   octet_preemptions_total, octet_worker_group_failures_total
//   octet_time_to_first_token_seconds, octet_inter_token_latency_seconds,
//   octet_e2e_request_latency_seconds           histograms
//
// The engine records what reaches it, the API what it refuses before.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace octet {

class Metrics {
 public:
  Metrics();

  // What the /metrics endpoint serves.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // A request ended with `code`; `finish_reason` is length, eos or stop for
  // OK and "none" otherwise. Requests refused before they ran count here too.
  void RequestEnded(absl::StatusCode code, const std::string &finish_reason);
  // Seconds from arrival to the first token, between two tokens of one
  // request, and from arrival to the end of every request the engine took
  // (finished, cancelled or failed).
  void TimeToFirstToken(double seconds) { ttft_.Observe(seconds); }
  void InterTokenLatency(double seconds) { itl_.Observe(seconds); }
  void RequestLatency(double seconds) { e2e_.Observe(seconds); }
  void PromptTokens(int64_t n) { prompt_tokens_.Increment(n); }
  void GenerationTokens(int64_t n) { generation_tokens_.Increment(n); }
  void Preemptions(int64_t n) { preemptions_.Increment(n); }
  void WorkerGroupFailed() { group_failures_.Increment(); }
  // Tokens a step's admissions looked up in the prefix cache, and found.
  void PrefixCacheLookups(int64_t queries, int64_t hits);
  // The scheduler's state after a step.
  void SetLoad(int64_t waiting, int64_t running, int64_t blocks_used,
               int64_t blocks_free, int64_t blocks_cached);
  // Requests waiting, when one more arrives.
  void SetWaiting(int64_t waiting) {
    waiting_.Set(static_cast<double>(waiting));
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter> &requests_;
  prometheus::Gauge &waiting_, &running_, &blocks_used_, &blocks_free_,
      &blocks_cached_, &hit_rate_;
  prometheus::Counter &prompt_tokens_, &generation_tokens_, &preemptions_,
      &group_failures_, &cache_queries_, &cache_hits_;
  prometheus::Histogram &ttft_, &itl_, &e2e_;
};

// gRPC's name of a status code (OK, INVALID_ARGUMENT, ...), as the
// `code` label writes it.
std::string StatusCodeName(absl::StatusCode code);

}  // namespace octet
