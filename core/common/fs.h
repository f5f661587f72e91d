#pragma once
// Small file helpers with explicit durability.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost {

// Writes `data` to `path` so that a reader sees either the old file or the complete new one,
// never a partial one, even across a crash: write <path>.tmp.<pid>, fsync it, rename it over
// `path`, fsync the directory. UNAVAILABLE / RESOURCE_EXHAUSTED (disk full) naming the path.
absl::Status write_file_atomic(const std::string& path, const std::string& data);

// Reads a whole regular file of at most `max_bytes`. NOT_FOUND when absent; INVALID_ARGUMENT when
// not a regular file or larger ("<path>: N bytes is larger than <limit_name>=<max_bytes>"). The file is
// opened non-blocking and checked before any read, so a FIFO, socket or device is refused at once
// (opening a FIFO for reading would otherwise wait for a writer forever).
absl::StatusOr<std::string> read_file(const std::string& path, int64_t max_bytes = int64_t{1} << 32,
                                      const char* limit_name = "the limit");
// open(2) O_RDONLY of a regular file, the same way (non-blocking open, fstat, then blocking again): the fd
// (and, with `size`, the file's size from that fstat), or NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT
// ("<path>: is a FIFO, not a regular file").
absl::StatusOr<int> open_regular_file(const std::string& path, int64_t* size = nullptr);

// What a configured path must be. check_path: OK when `path` is of that kind (following symlinks);
// otherwise "<field>: \"<path>\" is a directory, not a regular file" (INVALID_ARGUMENT) or
// "<field>: \"<path>\" does not exist" (NOT_FOUND; with kDirectoryOrAbsent a missing path is OK: it will
// be created).
enum class PathKind { kRegularFile, kDirectory, kDirectoryOrAbsent };
absl::Status check_path(const std::string& field, const std::string& path, PathKind kind);
// "a regular file" | "a directory" | "a FIFO" | "a socket" | "a character device" | "a block device" |
// "a symbolic link" | "something else" for a stat mode.
const char* file_kind_name(unsigned mode);

// Test-only crash hook (kill -9 at a chosen point, to test recovery; the one environment switch read
// in core/, kept because a test must set it in a child process before any config exists): when
// FROST_FAILPOINT is "<name>" or "<name>:<substring>" and `path` contains <substring>, the
// process sends itself SIGKILL here. Points: "kill_before_rename" in write_file_atomic (the new
// file is complete and fsynced under its temporary name; the old one is still in place).
void crash_failpoint(const char* name, const std::string& path);

// fsync of a directory (makes renames and new entries in it durable); best effort.
void fsync_dir(const std::string& dir);

// rename(2) (atomic: readers see `from` or `to`, never a mix; works for directories), then fsync
// of the parent directories so the rename survives a crash.
absl::Status rename_durable(const std::string& from, const std::string& to);

// mkdir -p; OK when it exists as a directory.
absl::Status make_dirs(const std::string& path);

}  // namespace frost
