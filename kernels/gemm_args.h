// Argument checks shared by every GEMM entry point (CPU and CUDA), so that
// both backends reject the same inputs with the same messages.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/dtype.h"

namespace octet {

// Y[M,N] = A[M,K] · B[N,K]ᵀ: dimensions >= 0, an f32 or bf16 output, and a
// non-null pointer for every operand that has elements. `what` names the
// caller in the message.
inline absl::Status CheckGemmArgs(const void* a, const void* b, int64_t m,
                                  int64_t n, int64_t k, const void* y,
                                  DType y_dtype, const char* what) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": dimensions must be >= 0, got M=", m, " N=", n, " K=", k));
  }
  if (y_dtype != DType::kF32 && y_dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": output type must be f32 or bf16, got ", DTypeName(y_dtype)));
  }
  if ((m > 0 && n > 0 && y == nullptr) || (m > 0 && k > 0 && a == nullptr) ||
      (n > 0 && k > 0 && b == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null operand"));
  }
  return absl::OkStatus();
}

// The bucket of row counts that a choice of GEMM made for `rows` rows
// covers: the next power of two (1 for rows <= 1), so a choice for R rows
// holds for (R / 2, R] (Backend::SetRowGroupGemmWay).
inline int64_t RowBucket(int64_t rows) {
  int64_t bucket = 1;
  while (bucket < rows) bucket *= 2;
  return bucket;
}

}  // namespace octet
