#pragma once
// ArtifactStore: the versioned, durable registry of trained artifacts on disk.
//
// Layout under `root` (frostd: <state_dir>/artifacts):
//   <kind>/<version>/            one artifact: the kind's files (prototype: prototype.safetensors +
//                                manifest.json with per-file sha256), artifact.json (ours) and
//                                checksums.json (size and sha256 of every other file, artifact.json
//                                included), which verify() checks before anything is loaded
//   <kind>/NEXT                  next version number (versions are never reused, even after delete)
//   <kind>/ACTIVE                "<kind>/<version>" of the active artifact, absent = none
//   .tmp-<kind>-<random>/        an artifact being written
//
// Atomic publication: publish() writes into a .tmp- directory, fsyncs every file (the writers use
// write_file_atomic), then renames the directory to <kind>/<version> and fsyncs the parent. A crash
// before the rename leaves only a .tmp- directory: never listed, never loadable, and removed by the
// next open(). ACTIVE and NEXT are replaced with write_file_atomic.
//
// Names: "<kind>/<version>", kind in [a-z0-9_]{1,32}, version a positive decimal integer. Anything
// else is INVALID_ARGUMENT naming the value (so a name can never address a path outside root).
// Thread-safe.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace frost::serving {

struct ArtifactInfo {
  std::string name;  // "prototype/3"
  std::string kind;
  int64_t version = 0;
  std::string dir;     // absolute directory of its files
  int64_t bytes = 0;   // on disk, all files
  std::string job_id;  // the job that produced it
  double created_unix = 0;
  std::string backbone;        // model name it was trained on
  std::string report_json;     // evaluation report ("" = none)
  bool has_checksums = false;  // published with checksums.json (verify() checks it)
};

struct ArtifactMeta {  // what publish() records in artifact.json
  std::string job_id;
  std::string backbone;
  std::string report_json;
};

// Parses "<kind>/<version>"; INVALID_ARGUMENT "<field>: ..." naming the value otherwise.
absl::StatusOr<std::pair<std::string, int64_t>> parse_artifact_name(const std::string& name,
                                                                    const std::string& field = "name");

class ArtifactStore {
 public:
  // Creates root when missing and removes leftover .tmp- directories (partial writes of a crashed
  // process).
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> open(const std::string& root);
  // Opens another process's store for reading only (an inference replica following a trainer): nothing is
  // created or cleaned up, and publish / remove / set_active are FAILED_PRECONDITION. A root that does
  // not exist yet reads as an empty store (the owner may start later).
  // `why`: what refusals of writes say ("" = the follower's reason).
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> open_read_only(const std::string& root,
                                                                       const std::string& why = "");

  // Publishes a new version of `kind`: `write(dir)` fills a fresh temporary directory; on success it
  // becomes <kind>/<version> atomically. `meta` is read after write() returns, so the writer may
  // fill it (e.g. the report of the evaluation it ran). On failure nothing is published and the temporary
  // directory is removed.
  absl::StatusOr<ArtifactInfo> publish(const std::string& kind, const ArtifactMeta& meta,
                                       const std::function<absl::Status(const std::string& dir)>& write);

  // Every published artifact of `kind` ("" = all kinds), by kind then version.
  absl::StatusOr<std::vector<ArtifactInfo>> list(const std::string& kind = "") const;
  // NOT_FOUND "artifact 'prototype/9' not found".
  absl::StatusOr<ArtifactInfo> get(const std::string& name) const;
  // Checks every file of the artifact against its checksums.json (size and sha256): DATA_LOSS naming the file
  // that is damaged, missing or replaced. Artifacts published before checksums.json existed (artifact.json
  // without "checksums") pass unchecked; the kind's own checks still apply to them.
  absl::Status verify(const ArtifactInfo& a) const;
  // Removes the artifact's directory. The caller refuses to remove the active one.
  absl::Status remove(const std::string& name);

  // The persisted activation of `kind` (nullopt = none).
  absl::StatusOr<std::optional<std::string>> active(const std::string& kind) const;
  absl::Status set_active(const std::string& kind, const std::string& name);

  const std::string& root() const { return root_; }
  bool read_only() const { return read_only_; }
  // OK when writable; otherwise why "cannot <what>" (FAILED_PRECONDITION for a follower's store, UNAVAILABLE
  // for one opened read-only because jobs.state_dir is unavailable).
  absl::Status check_writable(const char* what) const;

 private:
  ArtifactStore(std::string root, bool read_only) : root_(std::move(root)), read_only_(read_only) {}
  absl::StatusOr<ArtifactInfo> read_info(const std::string& kind, int64_t version) const;

  std::string root_;
  bool read_only_ = false;
  std::string read_only_why_;
  mutable absl::Mutex mu_;  // serialises publish / remove / set_active (version allocation)
};

}  // namespace frost::serving
