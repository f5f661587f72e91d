#pragma once
// absl::Status propagation helpers used at every module boundary.
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FROST_STATUS_CONCAT_INNER_(a, b) a##b
#define FROST_STATUS_CONCAT_(a, b) FROST_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define FROST_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::absl::Status frost_status_ = (expr);          \
    if (!frost_status_.ok()) return frost_status_;  \
  } while (0)

// `FROST_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define FROST_ASSIGN_OR_RETURN(lhs, expr) \
  FROST_ASSIGN_OR_RETURN_IMPL_(FROST_STATUS_CONCAT_(frost_statusor_, __LINE__), lhs, expr)
#define FROST_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
