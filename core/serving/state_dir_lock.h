#pragma once
// The state directory's lock: one frostd owns a state directory (its artifact store and job journal) at a
// time. Taken by the served-model life cycle (core/serving/served_model.h) before it opens the store
// read-write.
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost::serving {

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

}  // namespace frost::serving
