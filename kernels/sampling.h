// Choosing the next token from logits: repetition penalty, then greedy,
// temperature, top-k, top-p; and the chosen token's log-probability.
// The random draw depends only on the sequence's seed and the position of
// the token being chosen, so the same seed gives the same tokens, also for
// a sequence resumed elsewhere (recomputed after a preemption, or on a new
// worker group after one failed).
//
// This file is the host reference: the rules, in plain sequential code on
// binary32 logits. Backends sample through Backend::Sample
// (kernels/backend.h); the CPU backend runs this code, the CUDA backend its
// own kernels (kernels/cuda/sampling.h), and tests/kernels/
// backend_sampling_test.cc holds both to the same tests.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace octet {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  float top_p = 1.0f;        // keep the smallest set with mass >= top_p
  uint64_t seed = 0;
};

#if defined(__CUDACC__)
#define OCTET_HOST_DEVICE __host__ __device__
#else
#define OCTET_HOST_DEVICE
#endif

// SplitMix64's output function: a bijective mix of 64 bits.
OCTET_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The one uniform draw of a sampled token, in [0, 1): 53 bits of (seed,
// position) mixed, the same on every platform and device, whenever and
// wherever it is asked for.
OCTET_HOST_DEVICE inline double UniformDraw(uint64_t seed, int64_t position) {
  const uint64_t bits =
      SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(position)));
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// The greedy choice over `n` logits: the first index of the largest value;
// NaN never largest; 0 when no value is a number (every backend's greedy
// Sample follows this rule).
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

// Everything that decides one row's token: its parameters, where the token
// goes, and the tokens whose logits the repetition penalty lowers.
struct SampleRow {
  int64_t logits_row = 0;  // which row of the logits
  SamplingParams params = {};
  int64_t position = 0;  // of the token being chosen: the draw's position
  // > 0; 1 leaves the logits alone. For each distinct token id in `history`
  // (ids outside the vocabulary are ignored): a positive logit is divided
  // by it, any other multiplied.
  float repetition_penalty = 1.0f;
  absl::Span<const int32_t> history = {};
  bool logprob = false;  // also return the token's log-probability
};

struct SampledToken {
  int32_t id = 0;
  // log softmax of the penalized logits at `id`, in double, NaN counted as
  // -inf; 0 unless asked for.
  float logprob = 0.0f;
};

// How a backend lays out the rows it samples (Backend::StageSample).
struct SampleLayout {
  // 0: the rows as given, the sort (temperature, top-k, top-p) run on
  // those that draw. Otherwise the fixed shape a captured SampleStaged
  // needs: the rows padded up to this many with greedy rows of logit row 0
  // (kPaddingSampleRow), and the sort run on every row or on none.
  int64_t padded_rows = 0;
  // Keep room for this many rows, all drawing, so that staging up to that
  // many never moves a buffer a capture names (a decode graph's largest
  // bucket).
  int64_t reserve_rows = 0;
};

// What Backend::StageSample staged.
struct SampleStaging {
  int64_t rows = 0;    // padding included
  bool sorts = false;  // SampleStaged sorts rows' logits (some row draws)
  bool moved = false;  // buffers moved: captures of SampleStaged are stale
};

// Whether `row` draws a token (its logits sorted for top-k, top-p and the
// draw) rather than taking the argmax.
inline bool SampleRowDraws(const SampleRow& row, int64_t vocab) {
  return row.params.temperature != 0.0f && vocab > 1;
}

// What `rows` staged as `layout` says come to (Backend::StageSample's
// answer, less `moved`), after checking what a backend relies on: vocab in
// [1, 2^31), logits_row >= 0, padded_rows 0 or at least the rows' count;
// InvalidArgument naming the first that fails. Padding rows are greedy
// rows of logit row 0 with no history (kPaddingSampleRow).
absl::StatusOr<SampleStaging> PlanSampleStaging(
    int64_t vocab, absl::Span<const SampleRow> rows,
    const SampleLayout& layout);
inline constexpr SampleRow kPaddingSampleRow = {
    .logits_row = 0, .params = {.temperature = 0.0f}};

// Applies the repetition penalty of SampleRow to `row` in place.
void ApplyRepetitionPenalty(absl::Span<const int32_t> history, float penalty,
                            absl::Span<float> row);

// log softmax(row)[id] in double, NaN counted as -inf; when some logits are
// +inf they share the mass equally; -inf when no logit is above -inf.
float LogProb(absl::Span<const float> row, int64_t id);

// The reference for one row: penalty, Sampler, LogProb.
SampledToken SampleOne(absl::Span<const float> logits, const SampleRow& row);

}  // namespace octet
