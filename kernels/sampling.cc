#include "kernels/sampling.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace octet {

int64_t ArgmaxIndex(const float* logits, int64_t n) {
  int64_t best = 0;
  float best_value = -INFINITY;
  bool found = false;
  for (int64_t i = 0; i < n; ++i) {
    if (logits[i] > best_value || (!found && logits[i] == best_value)) {
      best = i;
      best_value = logits[i];
      found = true;
    }
  }
  return best;
}

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(std::isfinite(p.temperature) && p.temperature >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature must be a finite number >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0, got ", p.top_k));
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  return absl::OkStatus();
}

int64_t Sampler::Sample(absl::Span<const float> logits,
                        int64_t position) const {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (params_.temperature == 0.0f || n == 1) {
    return ArgmaxIndex(logits.data(), n);
  }
  // NaN counts as -inf (never likely), which also keeps the order below a
  // strict weak ordering.
  auto key = [&](int64_t i) {
    return std::isnan(logits[i]) ? -INFINITY : logits[i];
  };
  // Candidates by descending logit (ties: lower id first), cut to top_k.
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [&](int64_t a, int64_t b) {
    return key(a) != key(b) ? key(a) > key(b) : a < b;
  };
  int64_t keep = params_.top_k > 0 ? std::min(params_.top_k, n) : n;
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), more_likely);
  ids.resize(keep);
  // An infinite top logit takes all the mass, and no number at all leaves
  // none: both are the greedy rule's cases.
  const double top = key(ids[0]);
  if (!std::isfinite(top)) return ArgmaxIndex(logits.data(), n);
  // Softmax at the temperature, in double.
  std::vector<double> p(keep);
  double z = 0;
  for (int64_t i = 0; i < keep; ++i) {
    p[i] = std::exp((key(ids[i]) - top) / params_.temperature);
    z += p[i];
  }
  // Nucleus: the shortest prefix whose mass reaches top_p.
  if (params_.top_p < 1.0f) {
    double mass = 0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      mass += p[i] / z;
      if (mass >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    z = std::accumulate(p.begin(), p.begin() + cut, 0.0);
    keep = cut;
  }
  const double u = UniformDraw(params_.seed, position) * z;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[keep - 1];
}

void ApplyRepetitionPenalty(absl::Span<const int32_t> history, float penalty,
                            absl::Span<float> row) {
  if (penalty == 1.0f) return;
  const absl::flat_hash_set<int32_t> seen(history.begin(), history.end());
  for (int32_t id : seen) {
    if (id < 0 || id >= static_cast<int64_t>(row.size())) continue;
    row[id] = row[id] > 0 ? row[id] / penalty : row[id] * penalty;
  }
}

float LogProb(absl::Span<const float> row, int64_t id) {
  auto key = [](float v) {
    return std::isnan(v) ? -INFINITY : static_cast<double>(v);
  };
  double max = -INFINITY;
  for (float v : row) max = std::max(max, key(v));
  if (max == INFINITY) {  // the +inf logits share all the mass
    const double count = std::count(row.begin(), row.end(), INFINITY);
    return row[id] == INFINITY ? static_cast<float>(-std::log(count))
                               : -INFINITY;
  }
  if (max == -INFINITY) return -INFINITY;  // no mass anywhere
  double sum = 0;
  for (float v : row) sum += std::exp(key(v) - max);
  return static_cast<float>(key(row[id]) - max - std::log(sum));
}

absl::StatusOr<SampleStaging> PlanSampleStaging(
    int64_t vocab, absl::Span<const SampleRow> rows,
    const SampleLayout& layout) {
  if (vocab <= 0 || vocab > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: vocab ", vocab, " outside [1, 2^31)"));
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  if (layout.padded_rows != 0 && layout.padded_rows < n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling: ", n, " rows do not fit a layout of ", layout.padded_rows));
  }
  SampleStaging staging{.rows = std::max(n, layout.padded_rows)};
  for (const SampleRow& r : rows) {
    if (r.logits_row < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling: logits row ", r.logits_row, " below 0"));
    }
    staging.sorts = staging.sorts || SampleRowDraws(r, vocab);
  }
  return staging;
}

SampledToken SampleOne(absl::Span<const float> logits, const SampleRow& row) {
  // A copy only when the penalty changes the logits.
  std::vector<float> penalized;
  if (row.repetition_penalty != 1.0f) {
    penalized.assign(logits.begin(), logits.end());
    ApplyRepetitionPenalty(row.history, row.repetition_penalty,
                           absl::MakeSpan(penalized));
    logits = penalized;
  }
  SampledToken out;
  out.id =
      static_cast<int32_t>(Sampler(row.params).Sample(logits, row.position));
  if (row.logprob) out.logprob = LogProb(logits, out.id);
  return out;
}

}  // namespace octet
