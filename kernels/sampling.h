// Choosing the next token from logits: greedy, temperature, top-k, top-p,
// with a per-sequence seeded generator so the same seed gives the same
// tokens. Host code, on binary32 logits (every backend hands its logits to
// the host as binary32).
#pragma once

#include <cstdint>
#include <random>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace octet {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  float top_p = 1.0f;        // keep the smallest set with mass >= top_p
  uint64_t seed = 0;
};

// The greedy choice over `n` logits: the first index of the largest value;
// NaN never largest; 0 when no value is a number (every backend's Argmax
// follows this rule).
int64_t ArgmaxIndex(const float* logits, int64_t n);

// InvalidArgument naming the field: temperature < 0 or not finite, top_k < 0,
// top_p outside (0, 1].
absl::Status ValidateSamplingParams(const SamplingParams& params);

// Samples one sequence's tokens. Not thread-safe; one per sequence.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // The next token id for `logits` (one per vocabulary entry).
  int64_t Sample(absl::Span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace octet
