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
// not a regular file or larger ("<path>: N bytes is larger than <limit_name>=<max_bytes>").
absl::StatusOr<std::string> read_file(const std::string& path, int64_t max_bytes = int64_t{1} << 32,
                                      const char* limit_name = "the limit");

// mkdir -p; OK when it exists as a directory.
absl::Status make_dirs(const std::string& path);

}  // namespace frost
