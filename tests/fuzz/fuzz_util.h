#pragma once
// Helpers shared by the libFuzzer targets of tests/fuzz (docs/fuzzing.md).
//
// A target calls a parser on the input bytes and checks what the parser promises beyond "does not
// crash" (round trips, error codes, bounds) with FROST_FUZZ_CHECK, which aborts so that libFuzzer
// records the input as a crash. Parsers that read a path get the bytes through a FuzzDir: a private
// directory on tmpfs (/dev/shm when present), created once per process and rewritten per input.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/common/log.h"

namespace frost::fuzz {

// Prints the broken promise and aborts (ASan prints the stack; libFuzzer saves the input).
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: FROST_FUZZ_CHECK(%s) failed: %s\n", file, line, cond, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FROST_FUZZ_CHECK(cond, detail)                                         \
  do {                                                                         \
    if (!(cond)) ::frost::fuzz::check_failed(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)

// The parsers' own warnings would flood libFuzzer's output: only errors are printed.
inline void quiet_logs() { set_log_level(LogLevel::kError); }

// A parser error must be INVALID_ARGUMENT (the code every parser documents for bad bytes), except for
// the codes listed in `also_ok` (e.g. DATA_LOSS for a checksum mismatch).
inline void check_rejection(const absl::Status& s, std::initializer_list<absl::StatusCode> also_ok = {}) {
  if (s.ok() || s.code() == absl::StatusCode::kInvalidArgument) return;
  for (absl::StatusCode c : also_ok)
    if (s.code() == c) return;
  check_failed(__FILE__, __LINE__, "check_rejection", s.ToString());
}

// A directory of its own under /dev/shm (or $TMPDIR, /tmp), removed at exit.
class FuzzDir {
 public:
  FuzzDir() {
    const char* base = "/dev/shm";
    struct stat st {};
    if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) {
      base = std::getenv("TMPDIR");
      if (base == nullptr || *base == '\0') base = "/tmp";
    }
    std::string tmpl = std::string(base) + "/frost-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~FuzzDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  FuzzDir(const FuzzDir&) = delete;
  FuzzDir& operator=(const FuzzDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Creates dir/rel's parent directories and writes `bytes` to it (replacing it).
  std::string write(const std::string& rel, std::string_view bytes) const {
    const std::string p = file(rel);
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path(), ec);
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::perror(p.c_str());
      std::abort();
    }
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
      if (n <= 0) {
        std::perror(p.c_str());
        std::abort();
      }
      off += static_cast<size_t>(n);
    }
    ::close(fd);
    return p;
  }

 private:
  std::string path_;
};

// One FuzzDir per process (libFuzzer runs inputs one after another in one thread).
inline const FuzzDir& fuzz_dir() {
  static const FuzzDir* dir = new FuzzDir();  // leaked on purpose: removed by atexit below
  static const bool registered = [] {
    std::atexit([] { delete dir; });
    return true;
  }();
  (void)registered;
  return *dir;
}

// Splits the input at the first occurrence of `sep` (absent: all of it is `head`).
inline std::pair<std::string_view, std::string_view> split_input(std::string_view in, std::string_view sep) {
  const size_t at = in.find(sep);
  if (at == std::string_view::npos) return {in, {}};
  return {in.substr(0, at), in.substr(at + sep.size())};
}

}  // namespace frost::fuzz
