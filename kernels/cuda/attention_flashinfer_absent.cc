// attention_flashinfer.h in a build without FlashInfer's headers
// (scripts/fetch-flashinfer.sh did not run, or could not reach PyPI): the
// kernels are absent and the CUDA backend keeps octet's attention for
// every forward.
#include "kernels/cuda/attention_flashinfer.h"

namespace octet::cuda {

struct FlashInferPrefill::State {};

bool FlashInferPrefill::Built() { return false; }

const char* FlashInferPrefill::Version() { return ""; }

bool FlashInferPrefill::Serves(int64_t, int64_t, int64_t, int) { return false; }

FlashInferPrefill::FlashInferPrefill() = default;

FlashInferPrefill::~FlashInferPrefill() = default;

absl::Status FlashInferPrefill::Plan(const AttentionBatch&, int64_t, int64_t,
                                     int64_t, int64_t, int64_t, cudaStream_t) {
  return absl::FailedPreconditionError(
      "FlashInfer prefill: this build has no FlashInfer "
      "(scripts/fetch-flashinfer.sh)");
}

absl::Status FlashInferPrefill::Run(const void*, int64_t, int64_t, int64_t,
                                    int64_t, const void*, const void*, void*,
                                    cudaStream_t) {
  return absl::FailedPreconditionError(
      "FlashInfer prefill: this build has no FlashInfer "
      "(scripts/fetch-flashinfer.sh)");
}

}  // namespace octet::cuda
