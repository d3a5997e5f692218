// The two early-return macros every floor uses with absl::Status.
//
//   OCTET_RETURN_IF_ERROR(backend.Copy(dst, src, bytes));
//   OCTET_ASSIGN_OR_RETURN(DeviceBuffer buf, backend.Allocate(bytes));
//
// Each evaluates its expression once and, when the status is not OK,
// returns it unchanged from the enclosing function (which returns
// absl::Status or any absl::StatusOr<T>). base/ is the ground floor, below
// every other, so every floor includes it. CUDA-family error codes become
// statuses through kernels/cuda/cuda_check.h instead.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define OCTET_STATUS_MACROS_CONCAT_INNER(a, b) a##b
#define OCTET_STATUS_MACROS_CONCAT(a, b) OCTET_STATUS_MACROS_CONCAT_INNER(a, b)

#define OCTET_RETURN_IF_ERROR(expr)                                 \
  do {                                                              \
    if (absl::Status octet_status_ = (expr); !octet_status_.ok()) { \
      return octet_status_;                                         \
    }                                                               \
  } while (false)

// `lhs` may declare a variable (`auto x`, `std::string s`) or name one.
#define OCTET_ASSIGN_OR_RETURN(lhs, rexpr) \
  OCTET_ASSIGN_OR_RETURN_IMPL(             \
      OCTET_STATUS_MACROS_CONCAT(octet_statusor_, __LINE__), lhs, rexpr)

#define OCTET_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr)  \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)
