#include "core/serving/state_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/errno_status.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"

namespace frost::serving {

namespace {

// The pid written by the holder; 0 when unreadable (e.g. the holder has locked but not yet
// written it).
long read_pid(int fd) {
  char buf[32];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return 0;
  long pid = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, static_cast<size_t>(n))), &pid)) {
    return 0;
  }
  return pid;
}

bool write_all_at(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t w = ::pwrite(fd, data.data() + off, data.size() - off, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateDirLock>> StateDirLock::acquire(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("state directory: empty path");
  if (dir.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("state directory: path contains a NUL byte");
  }
  FROST_RETURN_IF_ERROR(make_dirs(dir));
  const std::string lock_path = dir + "/LOCK";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return errno_status(absl::StrCat("cannot open state directory lock ", lock_path), errno);
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      return errno_status(absl::StrCat("cannot lock ", lock_path), err);
    }
    // The holder writes its pid just after locking: give it a moment.
    long pid = read_pid(fd);
    for (int i = 0; pid == 0 && i < 20; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      pid = read_pid(fd);
    }
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("state directory '", dir, "' is in use by another frostd (pid ",
                     pid != 0 ? absl::StrCat(pid) : std::string("unknown"), ")"));
  }
  const std::string pid_text = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || !write_all_at(fd, pid_text)) {
    const int err = errno;
    ::close(fd);  // releases the lock
    return errno_status(absl::StrCat("cannot write pid to ", lock_path), err);
  }
  ::fdatasync(fd);
  return std::unique_ptr<StateDirLock>(new StateDirLock(dir, fd));
}

StateDirLock::~StateDirLock() {
  if (fd_ < 0) return;
  // Clear the pid while still holding the lock, so the file never names a process that no
  // longer holds it (after a crash it may; the lock itself is what counts).
  if (::ftruncate(fd_, 0) != 0) {
    // Nothing to do: the stale pid is informational only.
  }
  ::close(fd_);  // releases the flock
}

}  // namespace frost::serving
