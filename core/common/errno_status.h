#pragma once
// The one errno → Status table of frost (files, the job journal, the state directory lock).
//   ENOENT, ENOTDIR      → NOT_FOUND
//   EACCES, EPERM, EROFS → PERMISSION_DENIED
//   ENOSPC, EDQUOT       → RESOURCE_EXHAUSTED
//   anything else        → UNAVAILABLE (transient or environmental: the caller may retry)
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace frost {

absl::StatusCode errno_code(int err);
// Status with errno_code(err) and the message "<what>: <strerror(err)>".
absl::Status errno_status(absl::string_view what, int err);

}  // namespace frost
