#include "core/common/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace frost {

absl::StatusCode errno_code(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kUnavailable;
  }
}

absl::Status errno_status(absl::string_view what, int err) {
  return absl::Status(errno_code(err), absl::StrCat(what, ": ", std::strerror(err)));
}

}  // namespace frost
