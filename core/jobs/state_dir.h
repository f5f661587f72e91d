#pragma once
// The server's state directory lock and the check that keeps user-supplied data paths inside
// the configured data root.
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost::jobs {

// Exclusive lock of a state directory: flock(LOCK_EX | LOCK_NB) on <dir>/LOCK, creating the
// directory and the file; the file holds the holder's pid as text. Released by the destructor,
// and by the kernel when the process dies (even by SIGKILL). The descriptor is close-on-exec, so
// child processes do not inherit the lock.
class StateDirLock {
 public:
  // FAILED_PRECONDITION "state directory '<dir>' is in use by another frostd (pid N)" while
  // another open of the LOCK file (another process, or another StateDirLock in this one) holds
  // it. INVALID_ARGUMENT for an empty dir; the errno-derived code naming the path when the
  // directory or file cannot be created.
  static absl::StatusOr<std::unique_ptr<StateDirLock>> acquire(const std::string& dir);
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  StateDirLock(std::string dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
  std::string dir_;
  int fd_ = -1;
};

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
