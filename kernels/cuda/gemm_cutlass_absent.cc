// gemm_cutlass.h in a build without the CUTLASS headers
// (scripts/fetch-cutlass.sh did not run, or could not reach PyPI): the
// kernel is absent and CublasLtGemm does not offer its way.
#include "kernels/cuda/gemm_cutlass.h"

namespace octet::cutlass_gemm {

bool Built() { return false; }

const char* Version() { return ""; }

bool Serves(int64_t, int64_t, int64_t, const void*, const void*,
            const void*) {
  return false;
}

absl::Status RowScaledE4m3(const uint8_t*, const uint8_t*, const float*,
                           int64_t, int64_t, int64_t, void*, void*, size_t,
                           cudaStream_t) {
  return absl::FailedPreconditionError(
      "CUTLASS FP8 GEMM: this build has no CUTLASS (scripts/fetch-cutlass.sh)");
}

}  // namespace octet::cutlass_gemm
