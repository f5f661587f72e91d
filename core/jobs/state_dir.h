#pragma once
// The check that keeps user-supplied data paths inside the configured data root (the state directory's lock
// is core/serving/state_dir_lock.h).
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost::jobs {

// Resolves a user-supplied data path against a data root: `path` relative to `root`, or
// absolute. Returns its realpath(), which must lie inside realpath(root) (the root itself counts
// as inside; /data2 is not inside /data). Errors, all naming `field`:
//   INVALID_ARGUMENT "<field>: path '<path>' is outside the data root '<root>'" for '..' escapes,
//     absolute paths elsewhere and symlinks that lead out (also when their target is missing);
//   INVALID_ARGUMENT "<field>: '<path>' does not exist" for a missing path inside the root;
//   INVALID_ARGUMENT "<field>: '<path>' is not a regular file" when require_file and it is not;
//   INVALID_ARGUMENT for an empty path or one containing a NUL byte;
//   FAILED_PRECONDITION when the root itself cannot be resolved.
// The check is made once: a file swapped for a symlink afterwards is not caught.
absl::StatusOr<std::string> resolve_data_path(const std::string& root, const std::string& path,
                                              const std::string& field, bool require_file = true);

}  // namespace frost::jobs
