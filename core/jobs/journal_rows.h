#pragma once
// A job as the journal stores it (journal_rows.cc): the row with its spec and progress as JSON text, the
// checksum that covers it (row_sha), and the conversions between it, a SELECT of kColumns and a JobRecord.
// Shared by core/jobs/journal*.cc; not an API (journal.h is).
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/jobs/journal.h"

namespace frost::jobs::journal_detail {

// Column order read by read_raw().
constexpr const char* kColumns =
    "seq, id, kind, state, reason, priority, idempotency_key, spec_json, created_unix, started_unix,"
    " finished_unix, attempts, progress_json, artifact, report_json, checkpoint_path, row_sha";

bool valid_state(int v);  // a JobState's value

// One row as stored (spec and progress as their JSON text): what row_sha covers.
struct RawRow {
  int64_t seq = 0;
  std::string id, kind;
  int64_t state = 0;
  std::string reason;
  int64_t priority = 0;
  std::optional<std::string> idempotency_key;
  std::string spec_json;
  double created_unix = 0, started_unix = 0, finished_unix = 0;
  int64_t attempts = 0;
  std::string progress_json, artifact, report_json, checkpoint_path;
  std::string row_sha;
};

// SQLite has no checksums of its own: a flipped bit in a row's bytes would be read back as another value.
// row_sha, the SHA-256 of every column of the row, is written with the row and checked whenever it is read.
std::string row_checksum(const RawRow& r);
// The columns of a SELECT of kColumns at its current row.
RawRow read_raw(sqlite3_stmt* s);
// DATA_LOSS naming the journal and the job when the row does not match its row_sha.
absl::Status check_row(const std::string& path, const RawRow& r);
// A row read back: its checksum checked, then parsed.
absl::StatusOr<JobRecord> read_row(sqlite3_stmt* s, const std::string& path);
// The stored form of a record (what insert / update bind).
RawRow to_raw(const JobRecord& j, const std::string& spec_json);

}  // namespace frost::jobs::journal_detail
