// The one way CUDA-family errors become absl::Status.
//
//   OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
//   OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmul(...));
//
// evaluates the call once and, on failure, returns a status naming the call,
// the error and the source line. The error-type overloads of ToStatus live
// beside the library that defines the type (CUDA runtime and cuBLAS here;
// NCCL in parallel/), all in namespace octet::cuda_internal.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace octet::cuda_internal {

inline absl::Status ToStatus(cudaError_t e, const char* expr, const char* file,
                             int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg =
      absl::StrCat(expr, " failed: ", cudaGetErrorName(e), " (",
                   cudaGetErrorString(e), ") at ", file, ":", line);
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::UnavailableError(msg);
    case cudaErrorInvalidValue:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

inline absl::Status ToStatus(cublasStatus_t e, const char* expr,
                             const char* file, int line) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg =
      absl::StrCat(expr, " failed: ", cublasLtGetStatusName(e), " (",
                   cublasLtGetStatusString(e), ") at ", file, ":", line);
  switch (e) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(msg);
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::UnimplementedError(msg);
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace octet::cuda_internal

#define OCTET_CUDA_RETURN_IF_ERROR(expr)                                     \
  do {                                                                       \
    ::absl::Status octet_cuda_status_ =                                      \
        ::octet::cuda_internal::ToStatus((expr), #expr, __FILE__, __LINE__); \
    if (!octet_cuda_status_.ok()) return octet_cuda_status_;                 \
  } while (false)
