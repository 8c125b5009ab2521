// EXPECT_OK / ASSERT_OK: GoogleTest assertions on a status that print the status when it fails.
//
//   ASSERT_OK(scheduler.AddRequest(r, 0));
//   EXPECT_OK(tokenizer) << "vocabulary " << name;      // an absl::StatusOr<T>
//   ASSERT_OK(g.status) << cluster_->Logs();            // a grpc::Status
//   ASSERT_OK_AND_ASSIGN(auto model, LoadModel(path));  // StatusOr<T> -> T, or a fatal failure
//
// Each macro evaluates its argument exactly once, and, like every GoogleTest assertion, takes
// further context with `<<`. The argument is anything status-like: it has `ok()` and one of
//   status()                       absl::StatusOr<T> (its status is printed),
//   error_code() / error_message()  grpc::Status (found by its shape: no gRPC header is included,
//                                   since the scheduler core's tests link no gRPC),
//   code() / message()             absl::Status.
// A type with none of them does not compile: these macros are for statuses, not for booleans.
#pragma once

#include <concepts>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pagoda::testing {

template <typename T>
concept StatusOrLike = requires(const T& t) {
  { t.ok() } -> std::convertible_to<bool>;
  t.status();
};

template <typename T>
concept GrpcStatusLike = requires(const T& t) {
  { t.ok() } -> std::convertible_to<bool>;
  t.error_code();
  { t.error_message() } -> std::convertible_to<std::string>;
};

template <typename T>
concept AbslStatusLike = requires(const T& t) {
  { t.ok() } -> std::convertible_to<bool>;
  t.code();
  t.message();
};

template <typename T>
concept StatusLike = StatusOrLike<T> || GrpcStatusLike<T> || AbslStatusLike<T>;

// The status's code (by its canonical name) and message, e.g. "INVALID_ARGUMENT: top_k is -1".
// gRPC's and Abseil's canonical codes share their numbers, so a grpc::StatusCode is named too.
template <StatusLike T>
std::string DescribeStatus(const T& status) {
  if constexpr (StatusOrLike<T>) {
    return DescribeStatus(status.status());
  } else if constexpr (GrpcStatusLike<T>) {
    const auto code = static_cast<absl::StatusCode>(static_cast<int>(status.error_code()));
    return absl::StrCat(absl::StatusCodeToString(code), " (gRPC ",
                        static_cast<int>(status.error_code()), "): ", status.error_message());
  } else if constexpr (std::same_as<T, absl::Status>) {
    return status.ToString();  // also prints any payloads
  } else if constexpr (std::convertible_to<decltype(status.code()), absl::StatusCode>) {
    return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
  } else {
    return absl::StrCat("code ", static_cast<int>(status.code()), ": ", status.message());
  }
}

// The predicate-formatter behind EXPECT_OK / ASSERT_OK (GoogleTest's EXPECT_PRED_FORMAT1).
template <StatusLike T>
::testing::AssertionResult IsOkFormatter(const char* expression, const T& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "Value of: " << expression << "\nExpected: OK\n  Actual: " << DescribeStatus(status);
}

}  // namespace pagoda::testing

#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::pagoda::testing::IsOkFormatter, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::pagoda::testing::IsOkFormatter, expr)

// `ASSERT_OK_AND_ASSIGN(auto x, Foo());` declares/assigns x from the value of an
// absl::StatusOr, or fails the test fatally, printing the status. Like ASSERT_*, only in a
// function returning void.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  PAGODA_ASSERT_OK_AND_ASSIGN_IMPL_(PAGODA_TESTING_CONCAT_(pagoda_statusor_, __LINE__), lhs, expr)

#define PAGODA_TESTING_CONCAT_INNER_(a, b) a##b
#define PAGODA_TESTING_CONCAT_(a, b) PAGODA_TESTING_CONCAT_INNER_(a, b)
#define PAGODA_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)                            \
  auto tmp = (expr);                                                                 \
  GTEST_ASSERT_(::pagoda::testing::IsOkFormatter(#expr, tmp), GTEST_FATAL_FAILURE_); \
  lhs = std::move(tmp).value()
