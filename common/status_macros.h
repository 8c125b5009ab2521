// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
//
// Debian's Abseil (20220623) ships no status macros, so Pagoda carries these two. They are the
// only macros allowed for control flow; every public boundary returns absl::Status(Or).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PAGODA_STATUS_CONCAT_INNER(a, b) a##b
#define PAGODA_STATUS_CONCAT(a, b) PAGODA_STATUS_CONCAT_INNER(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the caller when it is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status pagoda_status_ = (expr);          \
    if (!pagoda_status_.ok()) return pagoda_status_; \
  } while (false)

// `ASSIGN_OR_RETURN(auto x, Foo());` declares/assigns x from an absl::StatusOr, or returns its
// status from the caller.
#define ASSIGN_OR_RETURN(lhs, expr) \
  PAGODA_ASSIGN_OR_RETURN_IMPL(PAGODA_STATUS_CONCAT(pagoda_statusor_, __LINE__), lhs, expr)

#define PAGODA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
