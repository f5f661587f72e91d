#include "core/jobs/journal.h"

#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/jobs/journal_rows.h"
#include "core/jobs/journal_sqlite.h"

// The job journal's queries: insert (idempotent by key), get, list, update and the counts, each on its
// prepared statement. Writes go through the writer connection under mu_; reads through a second connection
// under rmu_: in WAL mode a reader sees the last commit and never waits for a writer, so a read is not held
// up by a write that holds mu_ through its synchronous=FULL commit (or waits for another process's lock).
// Opening, the schema and migrations are in journal_schema.cc; the stored row in journal_rows.cc; the SQLite
// plumbing in journal_sqlite.cc.

namespace frost::jobs {
using namespace journal_detail;  // NOLINT(build/namespaces): the journal's own plumbing

namespace {

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return "QUEUED";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kInterrupted:
      return "INTERRUPTED";
  }
  return "UNKNOWN";
}

bool is_terminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled ||
         s == JobState::kInterrupted;
}

struct Journal::Statements {
  StmtPtr begin, commit, rollback;
  StmtPtr insert, set_sha, by_id, by_key, update, count;
};

Journal::Journal(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {
  try {
    std::random_device rd;
    std::seed_seq seed{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    rng_.seed(seed);
  } catch (...) {
    // No usable random_device: fall back to time and pid (ids stay unique through the UNIQUE index).
    rng_.seed(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
              (static_cast<uint64_t>(::getpid()) << 32));
  }
}

Journal::~Journal() {
  stmts_.reset();  // finalize before closing
  rstmts_.reset();
  if (db_ != nullptr) sqlite3_close_v2(db_);
  if (rdb_ != nullptr) sqlite3_close_v2(rdb_);
}

absl::Status Journal::error(const char* op, int rc) const { return sqlite_error(path_, op, rc, db_); }

absl::Status Journal::read_error(const char* op, int rc) const { return sqlite_error(path_, op, rc, rdb_); }

absl::Status Journal::open_reader() {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status st = sqlite_error(path_, "open reader", rc, db);
    sqlite3_close_v2(db);
    return st;
  }
  rdb_ = db;
  sqlite3_busy_timeout(rdb_, 10000);  // WAL readers wait only in rare cases (recovery of the -shm file)
  if (const int q = sqlite3_exec(rdb_, "PRAGMA query_only=1", nullptr, nullptr, nullptr); q != SQLITE_OK)
    return read_error("PRAGMA query_only", q);
  return prepare_statements(rdb_, &rstmts_);
}

std::string Journal::new_id() { return absl::StrFormat("job-%012x", rng_() & uint64_t{0xFFFFFFFFFFFF}); }

absl::Status Journal::prepare_statements(sqlite3* db, std::unique_ptr<Statements>* out_stmts) {
  auto st = std::make_unique<Statements>();
  auto prep = [&](StmtPtr* out, const std::string& sql) -> absl::Status {
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    out->reset(raw);
    if (rc == SQLITE_OK) return absl::OkStatus();
    // A journal with our application_id and version but without the expected columns.
    if ((rc & 0xff) == SQLITE_ERROR) {
      return absl::FailedPreconditionError(
          absl::StrCat("job journal ", path_, ": not a frost job journal (", sqlite3_errmsg(db), ")"));
    }
    return sqlite_error(path_, "prepare", rc, db);
  };
  FROST_RETURN_IF_ERROR(prep(&st->begin, "BEGIN IMMEDIATE"));
  FROST_RETURN_IF_ERROR(prep(&st->commit, "COMMIT"));
  FROST_RETURN_IF_ERROR(prep(&st->rollback, "ROLLBACK"));
  FROST_RETURN_IF_ERROR(
      prep(&st->insert,
           "INSERT INTO jobs (id, kind, state, reason, priority, idempotency_key, spec_json,"
           " created_unix, started_unix, finished_unix, attempts, progress_json, artifact,"
           " report_json, checkpoint_path)"
           " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"));
  FROST_RETURN_IF_ERROR(prep(&st->set_sha, "UPDATE jobs SET row_sha = ?1 WHERE seq = ?2"));
  FROST_RETURN_IF_ERROR(prep(&st->by_id, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE id = ?1")));
  FROST_RETURN_IF_ERROR(
      prep(&st->by_key, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE idempotency_key = ?1")));
  FROST_RETURN_IF_ERROR(prep(&st->update,
                             "UPDATE jobs SET state = ?2, reason = ?3, started_unix = ?4, finished_unix = ?5,"
                             " attempts = ?6, progress_json = ?7, artifact = ?8, report_json = ?9,"
                             " checkpoint_path = ?10, row_sha = ?11 WHERE id = ?1"));
  FROST_RETURN_IF_ERROR(prep(&st->count, "SELECT state, count(*) FROM jobs GROUP BY state"));
  *out_stmts = std::move(st);
  return absl::OkStatus();
}

absl::StatusOr<Journal::Inserted> Journal::insert(JobRecord job) {
  job.kind = job_kind_name(job.spec);  // the kind is the spec's
  std::lock_guard<std::mutex> lock(mu_);
  WriteTxn txn(stmts_->begin.get(), stmts_->commit.get(),
               stmts_->rollback.get());  // rolls back unless committed
  if (const int rc = txn.begin(); rc != SQLITE_DONE) return error("insert: begin", rc);

  // BEGIN IMMEDIATE holds the database's write lock, so no other connection can add the key
  // between this lookup and the INSERT.
  if (!job.idempotency_key.empty()) {
    FROST_ASSIGN_OR_RETURN(std::optional<JobRecord> existing,
                           find_by_key_locked(*stmts_, db_, job.idempotency_key));
    if (existing) return Inserted{*std::move(existing), false};
  }

  job.state = JobState::kQueued;
  job.created_unix = now_unix();
  sqlite3_stmt* s = stmts_->insert.get();
  const std::string spec_json = spec_to_json(job.spec);
  int rc = SQLITE_OK;
  // A random id can collide with an existing one (UNIQUE): draw another.
  for (int attempt = 0; attempt < 8; ++attempt) {
    StmtScope scope(s);
    job.id = new_id();
    rc = bind_text(s, 1, job.id);
    if (rc == SQLITE_OK) rc = bind_text(s, 2, job.kind);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(s, 3, static_cast<int>(job.state));
    if (rc == SQLITE_OK) rc = bind_text(s, 4, job.reason);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(s, 5, job.priority);
    if (rc == SQLITE_OK) {
      rc = job.idempotency_key.empty() ? sqlite3_bind_null(s, 6) : bind_text(s, 6, job.idempotency_key);
    }
    if (rc == SQLITE_OK) rc = bind_text(s, 7, spec_json);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(s, 8, job.created_unix);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(s, 9, job.started_unix);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(s, 10, job.finished_unix);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(s, 11, job.attempts);
    if (rc == SQLITE_OK) rc = bind_text(s, 12, job.progress ? progress_to_json(*job.progress) : "");
    if (rc == SQLITE_OK) rc = bind_text(s, 13, job.artifact);
    if (rc == SQLITE_OK) rc = bind_text(s, 14, job.report_json);
    if (rc == SQLITE_OK) rc = bind_text(s, 15, job.checkpoint_path);
    if (rc == SQLITE_OK) rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) break;
    if ((rc & 0xff) != SQLITE_CONSTRAINT) break;
  }
  if (rc != SQLITE_DONE) return error("insert", rc);
  job.seq = sqlite3_last_insert_rowid(db_);
  {
    sqlite3_stmt* u = stmts_->set_sha.get();
    StmtScope scope(u);
    rc = bind_text(u, 1, row_checksum(to_raw(job, spec_json)));
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(u, 2, job.seq);
    if (rc == SQLITE_OK) rc = sqlite3_step(u);
    if (rc != SQLITE_DONE) return error("insert: checksum", rc);
  }
  if ((rc = txn.commit()) != SQLITE_DONE) return error("insert: commit", rc);
  return Inserted{std::move(job), true};
}

absl::StatusOr<std::optional<JobRecord>> Journal::find_by_key_locked(const Statements& stmts, sqlite3* db,
                                                                     const std::string& key) const {
  sqlite3_stmt* s = stmts.by_key.get();
  StmtScope scope(s);
  int rc = bind_text(s, 1, key);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    FROST_ASSIGN_OR_RETURN(JobRecord existing, read_row(s, path_));
    return std::optional<JobRecord>(std::move(existing));
  }
  if (rc != SQLITE_DONE) return sqlite_error(path_, "look up idempotency key", rc, db);
  return std::optional<JobRecord>();
}

absl::StatusOr<std::optional<JobRecord>> Journal::find_by_idempotency_key(const std::string& key) const {
  if (key.empty()) return std::optional<JobRecord>();
  std::lock_guard<std::mutex> lock(rmu_);
  return find_by_key_locked(*rstmts_, rdb_, key);
}

absl::StatusOr<JobRecord> Journal::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(rmu_);
  sqlite3_stmt* s = rstmts_->by_id.get();
  StmtScope scope(s);
  int rc = bind_text(s, 1, id);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return read_row(s, path_);
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
  return read_error("get", rc);
}

absl::StatusOr<std::vector<JobRecord>> Journal::list(const ListQuery& q) const {
  if (q.limit <= 0) return absl::InvalidArgumentError(absl::StrCat("list: limit ", q.limit, " must be > 0"));
  if (q.before_seq < 0) {
    return absl::InvalidArgumentError(absl::StrCat("list: before_seq ", q.before_seq, " must be >= 0"));
  }
  for (JobState st : q.states) {
    if (!valid_state(static_cast<int>(st))) {
      return absl::InvalidArgumentError(absl::StrCat("list: unknown state ", static_cast<int>(st)));
    }
  }
  // Only placeholders are spliced into the SQL; every value is bound.
  std::string sql = absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE 1");
  if (!q.states.empty()) {
    sql += " AND state IN (";
    for (size_t i = 0; i < q.states.size(); ++i) sql += i == 0 ? "?" : ", ?";
    sql += ")";
  }
  if (!q.kind.empty()) sql += " AND kind = ?";
  if (q.before_seq > 0) sql += " AND seq < ?";
  sql += " ORDER BY seq DESC LIMIT ?";

  std::lock_guard<std::mutex> lock(rmu_);
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(rdb_, sql.c_str(), -1, &raw, nullptr);
  StmtPtr s(raw);
  if (rc != SQLITE_OK) return read_error("list: prepare", rc);
  int idx = 1;
  for (JobState st : q.states) {
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(s.get(), idx++, static_cast<int>(st));
  }
  if (rc == SQLITE_OK && !q.kind.empty()) rc = bind_text(s.get(), idx++, q.kind);
  if (rc == SQLITE_OK && q.before_seq > 0) rc = sqlite3_bind_int64(s.get(), idx++, q.before_seq);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int(s.get(), idx++, q.limit);
  if (rc != SQLITE_OK) return read_error("list: bind", rc);
  std::vector<JobRecord> out;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    FROST_ASSIGN_OR_RETURN(JobRecord r, read_row(s.get(), path_));
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return read_error("list", rc);
  return out;
}

absl::Status Journal::update(const JobRecord& job) {
  if (!valid_state(static_cast<int>(job.state))) {
    return absl::InvalidArgumentError(
        absl::StrCat("update job '", job.id, "': unknown state ", static_cast<int>(job.state)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  WriteTxn txn(stmts_->begin.get(), stmts_->commit.get(),
               stmts_->rollback.get());  // rolls back unless committed
  if (const int rc = txn.begin(); rc != SQLITE_DONE) return error("update: begin", rc);
  // The stored row (checked) gives the columns update() does not change; row_sha covers them all.
  RawRow row;
  {
    sqlite3_stmt* g = stmts_->by_id.get();
    StmtScope scope(g);
    int rc = bind_text(g, 1, job.id);
    if (rc == SQLITE_OK) rc = sqlite3_step(g);
    if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job '", job.id, "' not found"));
    if (rc != SQLITE_ROW) return error("update: read", rc);
    row = read_raw(g);
    FROST_RETURN_IF_ERROR(check_row(path_, row));
  }
  {
    const RawRow mut = to_raw(job, "");
    row.state = mut.state;
    row.reason = mut.reason;
    row.started_unix = mut.started_unix;
    row.finished_unix = mut.finished_unix;
    row.attempts = mut.attempts;
    row.progress_json = mut.progress_json;
    row.artifact = mut.artifact;
    row.report_json = mut.report_json;
    row.checkpoint_path = mut.checkpoint_path;
  }
  sqlite3_stmt* s = stmts_->update.get();
  StmtScope scope(s);
  int rc = bind_text(s, 1, job.id);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int(s, 2, static_cast<int>(job.state));
  if (rc == SQLITE_OK) rc = bind_text(s, 3, job.reason);
  if (rc == SQLITE_OK) rc = sqlite3_bind_double(s, 4, job.started_unix);
  if (rc == SQLITE_OK) rc = sqlite3_bind_double(s, 5, job.finished_unix);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int(s, 6, job.attempts);
  if (rc == SQLITE_OK) rc = bind_text(s, 7, job.progress ? progress_to_json(*job.progress) : "");
  if (rc == SQLITE_OK) rc = bind_text(s, 8, job.artifact);
  if (rc == SQLITE_OK) rc = bind_text(s, 9, job.report_json);
  if (rc == SQLITE_OK) rc = bind_text(s, 10, job.checkpoint_path);
  if (rc == SQLITE_OK) rc = bind_text(s, 11, row_checksum(row));
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) return error("update", rc);
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("job '", job.id, "' not found"));
  // Committed (and, with synchronous=FULL, synced) before the call returns.
  if ((rc = txn.commit()) != SQLITE_DONE) return error("update: commit", rc);
  return absl::OkStatus();
}

absl::StatusOr<std::map<JobState, int64_t>> Journal::count_by_state() const {
  std::map<JobState, int64_t> out;
  for (int v = 1; v <= 6; ++v) out[static_cast<JobState>(v)] = 0;
  std::lock_guard<std::mutex> lock(rmu_);
  sqlite3_stmt* s = rstmts_->count.get();
  StmtScope scope(s);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const int state = sqlite3_column_int(s, 0);
    if (!valid_state(state)) {
      return absl::DataLossError(absl::StrCat("job journal ", path_, ": jobs with unknown state ", state));
    }
    out[static_cast<JobState>(state)] = sqlite3_column_int64(s, 1);
  }
  if (rc != SQLITE_DONE) return read_error("count_by_state", rc);
  return out;
}

}  // namespace frost::jobs
