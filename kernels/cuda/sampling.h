// Sampling on a CUDA device: the rules of kernels/sampling.h (repetition
// penalty, greedy, temperature, top-k, top-p, log-probabilities) as kernels,
// so that only token ids and log-probabilities cross to the host.
//
// Three calls on one stream, as Backend::StageSample, SampleStaged and
// TakeSampled (kernels/backend.h):
//  Stage (host work): the rows' parameters, the sort's segment offsets and
//    the histories go up in one copy from pinned host memory; every buffer
//    the next Run needs is grown here, never there.
//  Run (device work, capturable):
//   1. PenalizeKernel, a block per row: the penalized logits, and for rows
//      with a sort segment, sort keys (NaN as -inf, -0 as +0) and their ids.
//   2. The segments' keys are sorted descending and stably (CUB's
//      segmented sort): the host's order, larger first, lower id on ties.
//      Up to CUB's partitioning threshold (500 segments on sm_89 and
//      sm_90; ModelOptions::graph_max_batch is 64) it only launches
//      kernels, so a graph can hold it; above, CUB waits on the host and
//      the capture fails (its graph then runs eagerly, said once).
//   3. DrawKernel, a block per row: greedy rows take the argmax (the
//      ArgmaxIndex rule); drawing rows walk their sorted keys with the
//      host's arithmetic (binary64 softmax at the temperature, top-k cut,
//      nucleus cut, one UniformDraw of (seed, position)) through block-wide
//      prefix sums; then the log-probability where asked.
//   4. Ids and log-probabilities are copied to pinned host memory.
//  Take (host): waits for the stream and reads them: the step's one host
//    synchronisation.
// As SampleLayout says, rows staged as given get segments only where they
// draw; a fixed layout (a decode graph's) pads them and gives every row a
// segment or none, so that one capture of Run serves each staging of the
// same shape.
// Where the host adds in order, the kernels add in a tree, so a draw that
// falls within rounding of the boundary between two tokens may take the
// neighbour: both implementations pass the same tests
// (tests/kernels/backend_sampling_test.cc), not always with the same bits.
//
// Buffers (device and pinned) grow to the largest staging and are kept; a
// steady batch size allocates nothing, and a staging that grows one a
// capture names says so (SampleStaging::moved; a failed staging's growth
// is said by the next). One sampler serves one stream at a time.
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

  // As Backend::StageSample, Backend::SampleStaged and Backend::TakeSampled,
  // on `stream`: d_logits is device binary32 [*][vocab]. Stage is given
  // PlanSampleStaging's answer for `rows` and `layout` (made on the host
  // side of the backend); an error there leaves nothing staged.
  absl::StatusOr<SampleStaging> Stage(absl::StatusOr<SampleStaging> planned,
                                      int64_t vocab,
                                      absl::Span<const SampleRow> rows,
                                      const SampleLayout& layout,
                                      cudaStream_t stream);
  absl::Status Run(const float* d_logits, int64_t vocab, cudaStream_t stream);
  absl::Status Take(absl::Span<SampledToken> out, cudaStream_t stream);

 private:
  struct Scratch;  // sampling.cu
  explicit CudaSampler(std::unique_ptr<Scratch> scratch);
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace octet
