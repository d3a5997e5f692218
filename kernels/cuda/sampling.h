// Sampling on a CUDA device: the rules of kernels/sampling.h (repetition
// penalty, greedy, temperature, top-k, top-p, log-probabilities) as kernels,
// so that only token ids and log-probabilities cross to the host.
//
// One call, on one stream:
//  1. The rows' parameters and histories go up in one copy from pinned host
//     memory.
//  2. PenalizeKernel, a block per row: the penalized logits, and for rows
//     that draw, sort keys (NaN as -inf, -0 as +0) and their ids.
//  3. The drawing rows' keys are sorted descending and stably (CUB's
//     segmented sort): the host's order, larger first, lower id on ties.
//  4. DrawKernel, a block per row: greedy rows take the argmax (the
//     ArgmaxIndex rule); drawing rows walk their sorted keys with the host's
//     arithmetic (binary64 softmax at the temperature, top-k cut, nucleus
//     cut, one UniformDraw of (seed, position)) through block-wide prefix
//     sums; then the log-probability where asked.
//  5. Ids and log-probabilities come back in one copy to pinned memory: the
//     one host synchronisation.
// Where the host adds in order, the kernels add in a tree, so a draw that
// falls within rounding of the boundary between two tokens may take the
// neighbour: both implementations pass the same tests
// (tests/kernels/backend_sampling_test.cc), not always with the same bits.
//
// Scratch (device and pinned) grows to the largest call and is kept; a
// steady batch size allocates nothing. One sampler serves one stream at a
// time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/sampling.h"

namespace octet {

class CudaSampler {
 public:
  static absl::StatusOr<std::unique_ptr<CudaSampler>> Create();
  ~CudaSampler();
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;

  // As Backend::Sample: d_logits is device binary32 [*][vocab]; out[i] (host)
  // receives row i's token. Waits for the stream.
  absl::Status Sample(const float* d_logits, int64_t vocab,
                      absl::Span<const SampleRow> rows, SampledToken* out,
                      cudaStream_t stream);

 private:
  struct Scratch;  // sampling.cu
  explicit CudaSampler(std::unique_ptr<Scratch> scratch);
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace octet
