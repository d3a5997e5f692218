#include "worker/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace octet {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Running {
  size_t index;
  std::vector<int32_t> table;
  int64_t cached = 0;         // tokens already in the cache
  std::vector<int32_t> next;  // tokens to feed next
  bool done = false;
};

// Appends `token` to the sequence's result and feeds it next; marks the
// sequence done on a stop id or at its token budget.
void AdvanceSequence(Running& s, int32_t token, const GenerationRequest& r,
                     const GenerationOptions& options, GenerationResult& out) {
  out.tokens.push_back(token);
  if (options.on_token) options.on_token(s.index, token);
  s.next = {token};
  if (std::find(r.stop_ids.begin(), r.stop_ids.end(), token) !=
      r.stop_ids.end()) {
    out.finish = FinishReason::kStop;
    s.done = true;
  } else if (static_cast<int64_t>(out.tokens.size()) >= r.max_new_tokens) {
    out.finish = FinishReason::kLength;
    s.done = true;
  }
}

// Adds one forward of `active` sequences to the stats: the first of a
// batch counts as prefill, the others as decode steps.
void AddStepStats(bool first, Clock::time_point start, size_t active,
                  GenerationStats* stats) {
  if (stats == nullptr) return;
  if (first) {
    stats->prefill_seconds += Since(start);
  } else {
    stats->decode_seconds += Since(start);
    stats->decode_steps += 1;
    stats->decoded_tokens += static_cast<int64_t>(active);
  }
}

// Generates for requests[indices] as one batch until each stops.
absl::Status RunBatch(LlamaModel& model, KvCache& cache,
                      const std::vector<GenerationRequest>& requests,
                      const std::vector<size_t>& indices,
                      const GenerationOptions& options,
                      std::vector<GenerationResult>& results,
                      GenerationStats* stats) {
  std::vector<Running> seqs;
  for (size_t i : indices) {
    seqs.push_back(Running{i, {}, 0, requests[i].prompt, false});
  }
  // Reserve each sequence's whole budget up front, so that a generation
  // never fails half way for want of blocks.
  absl::Status status = absl::OkStatus();
  for (Running& s : seqs) {
    const GenerationRequest& r = requests[s.index];
    status = cache.Reserve(
        static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens, &s.table);
    if (!status.ok()) break;
  }
  std::vector<SampledToken> tokens;
  bool first = true;
  while (status.ok()) {
    std::vector<SequenceStep> steps;
    std::vector<SampleRow> rows;
    std::vector<Running*> active;
    for (Running& s : seqs) {
      if (s.done) continue;
      // The new token goes after everything fed so far: that is its draw's
      // position.
      rows.push_back(SampleRow{
          .logits_row = static_cast<int64_t>(steps.size()),
          .params = requests[s.index].sampling,
          .position = s.cached + static_cast<int64_t>(s.next.size())});
      steps.push_back(SequenceStep{s.next, s.cached, &s.table});
      active.push_back(&s);
    }
    if (steps.empty()) break;
    const auto start = Clock::now();
    status = model.ForwardSample(steps, cache, rows, &tokens);
    if (!status.ok()) break;
    for (size_t j = 0; j < active.size(); ++j) {
      Running& s = *active[j];
      s.cached += static_cast<int64_t>(s.next.size());
      AdvanceSequence(s, tokens[j].id, requests[s.index], options,
                      results[s.index]);
    }
    AddStepStats(first, start, active.size(), stats);
    first = false;
  }
  for (Running& s : seqs) {
    absl::Status released = cache.Release(&s.table);
    if (status.ok()) status = released;
  }
  return status;
}

}  // namespace

absl::StatusOr<std::vector<GenerationResult>> Generate(
    LlamaModel& model, KvCache& cache,
    const std::vector<GenerationRequest>& requests,
    const GenerationOptions& options, GenerationStats* stats) {
  const ModelConfig& c = model.config();
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    absl::Status s = ValidateSamplingParams(r.sampling);
    if (!s.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, ": ", s.message()));
    if (r.prompt.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, ": empty prompt"));
    }
    if (r.max_new_tokens <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, ": max_new_tokens must be > 0"));
    }
    for (int32_t id : r.prompt) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("request ", i, ": token id ", id, " outside [0, ",
                         c.vocab_size, ")"));
      }
    }
    if (r.max_new_tokens >
        c.max_position_embeddings - static_cast<int64_t>(r.prompt.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", i, ": prompt (", r.prompt.size(),
                       " tokens) + max_new_tokens (", r.max_new_tokens,
                       ") exceed the context of ", c.max_position_embeddings));
    }
    if (stats != nullptr)
      stats->prompt_tokens += static_cast<int64_t>(r.prompt.size());
  }
  std::vector<GenerationResult> results(requests.size());
  if (options.one_at_a_time) {
    for (size_t i = 0; i < requests.size(); ++i) {
      OCTET_RETURN_IF_ERROR(
          RunBatch(model, cache, requests, {i}, options, results, stats));
    }
  } else {
    std::vector<size_t> all(requests.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    OCTET_RETURN_IF_ERROR(
        RunBatch(model, cache, requests, all, options, results, stats));
  }
  return results;
}

}  // namespace octet
