// The journal's stored row (journal_rows.h): the checksum over its columns, reading it from a statement,
// checking it, and converting between it and a JobRecord (the spec and progress through their JSON forms,
// core/jobs/job_spec.h).
#include "core/jobs/journal_rows.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/sha256.h"
#include "core/common/status_macros.h"
#include "core/jobs/journal_sqlite.h"

namespace frost::jobs::journal_detail {
namespace {

absl::StatusOr<JobRecord> parse_row(const RawRow& raw) {
  JobRecord r;
  r.seq = raw.seq;
  r.id = raw.id;
  r.kind = raw.kind;
  if (!valid_state(static_cast<int>(raw.state))) {
    return absl::DataLossError(absl::StrCat("job journal: job '", r.id, "' has unknown state ", raw.state));
  }
  r.state = static_cast<JobState>(raw.state);
  r.reason = raw.reason;
  r.priority = static_cast<int32_t>(raw.priority);
  r.idempotency_key = raw.idempotency_key.value_or("");
  // The spec is stored as JSON (core/jobs/job_spec.h); a row this version cannot read is reported, not
  // guessed at.
  absl::StatusOr<JobSpec> spec = spec_from_json(r.kind, raw.spec_json);
  if (!spec.ok()) {
    return absl::DataLossError(absl::StrCat(
        "job journal: job '", r.id, "' has a spec this frostd cannot read: ", spec.status().message()));
  }
  r.spec = *std::move(spec);
  r.created_unix = raw.created_unix;
  r.started_unix = raw.started_unix;
  r.finished_unix = raw.finished_unix;
  r.attempts = static_cast<int32_t>(raw.attempts);
  if (!raw.progress_json.empty()) r.progress = progress_from_json(raw.progress_json);
  r.artifact = raw.artifact;
  r.report_json = raw.report_json;
  r.checkpoint_path = raw.checkpoint_path;
  return r;
}

}  // namespace

bool valid_state(int v) { return v >= 1 && v <= 6; }

std::string row_checksum(const RawRow& r) {
  std::string b;
  auto text = [&](const std::string& v) { absl::StrAppend(&b, v.size(), ":", v, ";"); };
  auto num = [&](int64_t v) { absl::StrAppend(&b, v, ";"); };
  auto real = [&](double v) {
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(u));
    absl::StrAppend(&b, absl::Hex(u), ";");
  };
  num(r.seq);
  text(r.id);
  text(r.kind);
  num(r.state);
  text(r.reason);
  num(r.priority);
  if (r.idempotency_key) {
    text(*r.idempotency_key);
  } else {
    b += "null;";
  }
  text(r.spec_json);
  real(r.created_unix);
  real(r.started_unix);
  real(r.finished_unix);
  num(r.attempts);
  text(r.progress_json);
  text(r.artifact);
  text(r.report_json);
  text(r.checkpoint_path);
  return sha256_hex(b);
}

RawRow read_raw(sqlite3_stmt* s) {
  RawRow r;
  r.seq = sqlite3_column_int64(s, 0);
  r.id = column_text(s, 1);
  r.kind = column_text(s, 2);
  r.state = sqlite3_column_int64(s, 3);
  r.reason = column_text(s, 4);
  r.priority = sqlite3_column_int64(s, 5);
  if (sqlite3_column_type(s, 6) != SQLITE_NULL) r.idempotency_key = column_text(s, 6);
  r.spec_json = column_text(s, 7);
  r.created_unix = sqlite3_column_double(s, 8);
  r.started_unix = sqlite3_column_double(s, 9);
  r.finished_unix = sqlite3_column_double(s, 10);
  r.attempts = sqlite3_column_int64(s, 11);
  r.progress_json = column_text(s, 12);
  r.artifact = column_text(s, 13);
  r.report_json = column_text(s, 14);
  r.checkpoint_path = column_text(s, 15);
  r.row_sha = column_text(s, 16);
  return r;
}

absl::Status check_row(const std::string& path, const RawRow& r) {
  if (r.row_sha != row_checksum(r)) {
    return absl::DataLossError(absl::StrCat("job journal ", path, ": job '", r.id, "' (seq ", r.seq,
                                            ") does not match its checksum: the file is damaged"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> read_row(sqlite3_stmt* s, const std::string& path) {
  const RawRow raw = read_raw(s);
  FROST_RETURN_IF_ERROR(check_row(path, raw));
  return parse_row(raw);
}

RawRow to_raw(const JobRecord& j, const std::string& spec_json) {
  RawRow r;
  r.seq = j.seq;
  r.id = j.id;
  r.kind = j.kind;
  r.state = static_cast<int64_t>(j.state);
  r.reason = j.reason;
  r.priority = j.priority;
  if (!j.idempotency_key.empty()) r.idempotency_key = j.idempotency_key;
  r.spec_json = spec_json;
  r.created_unix = j.created_unix;
  r.started_unix = j.started_unix;
  r.finished_unix = j.finished_unix;
  r.attempts = j.attempts;
  r.progress_json = j.progress ? progress_to_json(*j.progress) : "";
  r.artifact = j.artifact;
  r.report_json = j.report_json;
  r.checkpoint_path = j.checkpoint_path;
  return r;
}

}  // namespace frost::jobs::journal_detail
