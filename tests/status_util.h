// Assertions on absl::Status and absl::StatusOr results that print the
// status when they fail: a failed GPU (or any) call says what it got, not
// only that it was not OK.
//
//   OCTET_ASSERT_OK(gemm->E4m3(...));   // fatal, as ASSERT_TRUE
//   OCTET_EXPECT_OK(backend->Synchronize());
//
// The expression is evaluated once; a StatusOr's status is the one printed.
#pragma once

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace octet::testing {

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace octet::testing

#define OCTET_STATUS_CHECK_(kind, expr)                                  \
  do {                                                                   \
    const absl::Status octet_status_ =                                   \
        ::octet::testing::StatusOf(expr);                                \
    kind##_TRUE(octet_status_.ok()) << #expr << ": " << octet_status_;   \
  } while (false)
#define OCTET_ASSERT_OK(expr) OCTET_STATUS_CHECK_(ASSERT, expr)
#define OCTET_EXPECT_OK(expr) OCTET_STATUS_CHECK_(EXPECT, expr)
