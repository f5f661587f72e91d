#pragma once
// An artifact's checked file: the one file of a KV artifact (kv_repair, kvsplice) beside manifest.json
// {"format", "file", "sha256", "bytes"}, which is written last. The job that trains the artifact writes it
// (write_checked_file, core/jobs); the kind that serves it verifies it before reading a byte of the tensors
// (verify_checked_file, core/serving/*_kind.cc). Its own translation unit, so that the manifest reader links
// without the KV trainers (tests/fuzz/artifact_manifest_fuzz.cc).
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost::serving {

// `save` writes dir/file, then manifest.json is written.
absl::Status write_checked_file(const std::string& dir, const std::string& file, const std::string& format,
                                const std::function<absl::Status(const std::string& path)>& save);
// Reads the manifest back, checks its format and file name and the file's sha256 (DATA_LOSS naming the file
// otherwise) and returns the file's path.
absl::StatusOr<std::string> verify_checked_file(const std::string& dir, const std::string& file,
                                                const std::string& format);

}  // namespace frost::serving
