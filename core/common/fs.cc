#include "core/common/fs.h"

#include "core/common/errno_status.h"

#include <signal.h>

#include <cstdlib>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace frost {

namespace {

absl::Status errno_status(const std::string& what, const std::string& path, int err) {
  return frost::errno_status(absl::StrCat(what, " ", path), err);
}

std::string parent_dir(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void crash_failpoint(const char* name, const std::string& path) {
  static const std::string spec = [] {
    const char* v = std::getenv("FROST_FAILPOINT");
    return std::string(v ? v : "");
  }();
  if (spec.empty()) return;
  const size_t colon = spec.find(':');
  if (spec.compare(0, colon, name) != 0) return;
  if (colon != std::string::npos && path.find(spec.substr(colon + 1)) == std::string::npos) return;
  ::kill(::getpid(), SIGKILL);
}

absl::Status write_file_atomic(const std::string& path, const std::string& data) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("cannot create", tmp, errno);
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return errno_status("cannot write", tmp, err);
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return errno_status("cannot fsync", tmp, err);
  }
  ::close(fd);
  crash_failpoint("kill_before_rename", path);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return errno_status("cannot rename onto", path, err);
  }
  fsync_dir(parent_dir(path));
  return absl::OkStatus();
}

void fsync_dir(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

absl::Status rename_durable(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return errno_status("cannot rename onto", to, errno);
  fsync_dir(parent_dir(to));
  if (parent_dir(from) != parent_dir(to)) fsync_dir(parent_dir(from));
  return absl::OkStatus();
}

const char* file_kind_name(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "something else";
}

absl::StatusOr<int> open_regular_file(const std::string& path, int64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading blocks until a writer appears; non-blocking, it returns at once
  // and fstat below refuses it. O_NOCTTY: a terminal never becomes ours.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errno_status("cannot open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return errno_status("cannot stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": is ", file_kind_name(st.st_mode), ", not a regular file"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size != nullptr) *size = static_cast<int64_t>(st.st_size);
  return fd;
}

absl::Status check_path(const std::string& field, const std::string& path, PathKind kind) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT && kind == PathKind::kDirectoryOrAbsent) return absl::OkStatus();
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(field, ": \"", path, "\" does not exist"));
    return frost::errno_status(absl::StrCat(field, ": \"", path, "\""), err);
  }
  const bool want_dir = kind != PathKind::kRegularFile;
  if (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", path, "\" is ", file_kind_name(st.st_mode),
                                                 ", not ", want_dir ? "a directory" : "a regular file"));
}

absl::StatusOr<std::string> read_file(const std::string& path, int64_t max_bytes, const char* limit_name) {
  int64_t size = 0;
  absl::StatusOr<int> opened = open_regular_file(path, &size);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  if (size > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes is larger than ", limit_name, "=", max_bytes));
  }
  std::string out(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      return errno_status("cannot read", path, err);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

absl::Status make_dirs(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("make_dirs: empty path");
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return errno_status("cannot create directory", cur, errno);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(path, ": exists and is not a directory"));
  return absl::OkStatus();
}

}  // namespace frost
