#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

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

namespace {

// SplitMix64's output function: a bijective mix of 64 bits.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

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
  // One uniform draw in [0, z), from 53 bits of (seed, position) mixed: the
  // same on every platform, whenever and wherever it is asked for.
  const uint64_t bits =
      Mix(params_.seed ^ Mix(static_cast<uint64_t>(position)));
  const double u = static_cast<double>(bits >> 11) * 0x1p-53 * z;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace octet
