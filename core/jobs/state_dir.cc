#include "core/jobs/state_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"

namespace frost::jobs {

namespace {

// realpath(); "" with errno set on failure.
std::string real_path(const std::string& p) {
  char* r = ::realpath(p.c_str(), nullptr);
  if (r == nullptr) return "";
  std::string out(r);
  std::free(r);
  return out;
}

// Like realpath(), but for a path that does not (fully) exist: symlinks are followed as far as
// the components exist (dangling ones included) and the missing rest is appended and normalised
// lexically. "" after too many links. Used only to decide which error to report.
std::string weak_real_path(const std::string& abs_path) {
  std::deque<std::string> todo = absl::StrSplit(abs_path, '/', absl::SkipEmpty());
  std::string cur;  // resolved so far; "" is "/"
  int links = 0;
  bool missing = false;
  while (!todo.empty()) {
    std::string c = std::move(todo.front());
    todo.pop_front();
    if (c == ".") continue;
    if (c == "..") {
      cur.resize(cur.empty() ? 0 : cur.rfind('/'));
      continue;
    }
    std::string next = absl::StrCat(cur, "/", c);
    struct stat st {};
    if (missing || ::lstat(next.c_str(), &st) != 0) {
      missing = true;  // from here on, lexical
      cur = std::move(next);
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      if (++links > 40) return "";
      std::string target(PATH_MAX, '\0');
      const ssize_t n = ::readlink(next.c_str(), target.data(), target.size());
      if (n <= 0) return "";
      target.resize(static_cast<size_t>(n));
      if (target[0] == '/') cur.clear();
      std::vector<std::string> parts = absl::StrSplit(target, '/', absl::SkipEmpty());
      todo.insert(todo.begin(), parts.begin(), parts.end());
      continue;
    }
    cur = std::move(next);
  }
  return cur.empty() ? "/" : cur;
}

bool is_inside(const std::string& real, const std::string& root_real) {
  if (root_real == "/") return !real.empty() && real[0] == '/';
  return real == root_real ||
         (real.size() > root_real.size() && real.compare(0, root_real.size(), root_real) == 0 &&
          real[root_real.size()] == '/');
}

}  // namespace

absl::StatusOr<std::string> resolve_data_path(const std::string& root, const std::string& path,
                                              const std::string& field, bool require_file) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": path is empty"));
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": path contains a NUL byte"));
  }
  if (root.empty() || root.find('\0') != std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(field, ": no usable data root is configured"));
  }
  const std::string root_real = real_path(root);
  if (root_real.empty()) {
    const int err = errno;
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": data root '", root, "' cannot be resolved: ", std::strerror(err)));
  }
  const std::string candidate = path[0] == '/' ? path : absl::StrCat(root_real, "/", path);
  const auto outside = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": path '", path, "' is outside the data root '", root, "'"));
  };
  std::string real = real_path(candidate);
  if (real.empty()) {
    const int err = errno;
    // Say "does not exist" only for a path that would lie inside the root: the real path of its
    // longest existing prefix plus the rest, normalised. Anything else is "outside", so that
    // errors do not reveal what exists elsewhere.
    const std::string weak = weak_real_path(candidate);
    if (weak.empty() || !is_inside(weak, root_real)) return outside();
    if (err == ENOENT || err == ENOTDIR) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' does not exist"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", path, "' cannot be resolved: ", std::strerror(err)));
  }
  if (!is_inside(real, root_real)) return outside();
  if (require_file) {
    struct stat st {};
    if (::stat(real.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' is not a regular file"));
    }
  }
  return real;
}

}  // namespace frost::jobs
