// Choosing the next token from logits: greedy, temperature, top-k, top-p.
// The random draw depends only on the sequence's seed and the position of
// the token being chosen, so the same seed gives the same tokens, also for
// a sequence resumed elsewhere (recomputed after a preemption, or on a new
// worker group after one failed). Host code, on binary32 logits (every backend
// hands its logits to the host as binary32).
#pragma once

#include <cstdint>

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

// Samples one sequence's tokens. Holds no state but its parameters: the
// draw for a token is a function of (seed, position).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params) {}
  // The token id for `logits` (one per vocabulary entry), which goes at
  // `position` of its sequence.
  int64_t Sample(absl::Span<const float> logits, int64_t position) const;

 private:
  SamplingParams params_;
};

}  // namespace octet
