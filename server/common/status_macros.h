// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status code (Debian's abseil 20220623 lacks them).
#ifndef DEVPLACE_SERVER_COMMON_STATUS_MACROS_H_
#define DEVPLACE_SERVER_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DEVPLACE_CONCAT_INNER_(a, b) a##b
#define DEVPLACE_CONCAT_(a, b) DEVPLACE_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the calling function when not OK.
#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    ::absl::Status devplace_status_ = (expr);       \
    if (!devplace_status_.ok()) return devplace_status_; \
  } while (0)

// `lhs = value of rexpr` (an absl::StatusOr<T>), or returns its status when not OK.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  DEVPLACE_ASSIGN_OR_RETURN_IMPL_(DEVPLACE_CONCAT_(devplace_statusor_, __LINE__), lhs, rexpr)
#define DEVPLACE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                    \
  if (!tmp.ok()) return tmp.status();                    \
  lhs = std::move(tmp).value()

#endif  // DEVPLACE_SERVER_COMMON_STATUS_MACROS_H_
