#include "core/jobs/journal.h"

#include "core/common/errno_status.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"

namespace frost::jobs {

namespace {

// PRAGMA application_id ('FRSJ') and PRAGMA user_version of the schema below.
constexpr int32_t kApplicationId = 0x4652534A;
constexpr int32_t kSchemaVersion = 1;

constexpr const char* kSchema =
    "CREATE TABLE jobs ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " id TEXT NOT NULL UNIQUE,"
    " kind TEXT NOT NULL,"
    " state INTEGER NOT NULL,"
    " reason TEXT NOT NULL,"
    " priority INTEGER NOT NULL,"
    " idempotency_key TEXT,"  // NULL when none, so the UNIQUE index ignores it
    " spec_json TEXT NOT NULL,"
    " created_unix REAL NOT NULL,"
    " started_unix REAL NOT NULL,"
    " finished_unix REAL NOT NULL,"
    " attempts INTEGER NOT NULL,"
    " progress_json TEXT NOT NULL,"
    " artifact TEXT NOT NULL,"
    " report_json TEXT NOT NULL,"
    " checkpoint_path TEXT NOT NULL);"
    "CREATE UNIQUE INDEX jobs_idempotency_key ON jobs(idempotency_key);"
    "CREATE INDEX jobs_state_seq ON jobs(state, seq);"
    "CREATE INDEX jobs_kind_seq ON jobs(kind, seq);";

// Column order read by read_row().
constexpr const char* kColumns =
    "seq, id, kind, state, reason, priority, idempotency_key, spec_json, created_unix, started_unix,"
    " finished_unix, attempts, progress_json, artifact, report_json, checkpoint_path";

absl::StatusCode code_for_sqlite(int rc, int sys_errno) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_NOTADB:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
      return sys_errno != 0 ? errno_code(sys_errno) : absl::StatusCode::kUnavailable;
    case SQLITE_CONSTRAINT:
      return absl::StatusCode::kAlreadyExists;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status sqlite_error(const std::string& path, const char* op, int rc, sqlite3* db) {
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const int sys = db != nullptr ? sqlite3_system_errno(db) : 0;
  return absl::Status(code_for_sqlite(rc, sys), absl::StrCat("job journal ", path, ": ", op, ": ", msg));
}

// Resets and clears a cached statement when the scope ends.
struct StmtScope {
  explicit StmtScope(sqlite3_stmt* s) : stmt(s) {}
  ~StmtScope() {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
  }
  StmtScope(const StmtScope&) = delete;
  StmtScope& operator=(const StmtScope&) = delete;
  sqlite3_stmt* stmt;
};

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

int bind_text(sqlite3_stmt* s, int i, const std::string& v) {
  return sqlite3_bind_text64(s, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}

std::string column_text(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  const int n = sqlite3_column_bytes(s, i);
  return p != nullptr ? std::string(p, static_cast<size_t>(n)) : std::string();
}

bool valid_state(int v) { return v >= 1 && v <= 6; }

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Explains, naming the path, why `path` cannot be opened or created before SQLite tries.
absl::Status check_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat("job journal ", path, ": not a regular file"));
    }
    if (::access(path.c_str(), R_OK | W_OK) != 0) {
      const int err = errno;
      return absl::Status(errno_code(err), absl::StrCat("job journal ", path, ": ", std::strerror(err)));
    }
  } else if (errno != ENOENT) {
    const int err = errno;
    return absl::Status(errno_code(err), absl::StrCat("job journal ", path, ": ", std::strerror(err)));
  }
  // The directory holds the -wal and -shm files, so it must be writable in either case.
  const std::string dir = parent_dir(path);
  struct stat dst {};
  if (::stat(dir.c_str(), &dst) != 0) {
    const int err = errno;
    return absl::Status(errno_code(err),
                        absl::StrCat("job journal ", path, ": directory ", dir, ": ", std::strerror(err)));
  }
  if (!S_ISDIR(dst.st_mode)) {
    return absl::NotFoundError(absl::StrCat("job journal ", path, ": ", dir, " is not a directory"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    return absl::Status(errno_code(err),
                        absl::StrCat("job journal ", path, ": directory ", dir, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> read_row(sqlite3_stmt* s) {
  JobRecord r;
  r.seq = sqlite3_column_int64(s, 0);
  r.id = column_text(s, 1);
  r.kind = column_text(s, 2);
  const int state = sqlite3_column_int(s, 3);
  if (!valid_state(state)) {
    return absl::DataLossError(absl::StrCat("job journal: job '", r.id, "' has unknown state ", state));
  }
  r.state = static_cast<JobState>(state);
  r.reason = column_text(s, 4);
  r.priority = sqlite3_column_int(s, 5);
  r.idempotency_key = column_text(s, 6);
  // The spec is stored as JSON (core/jobs/job_spec.h); a row this version cannot read is reported, not
  // guessed at.
  absl::StatusOr<JobSpec> spec = spec_from_json(r.kind, column_text(s, 7));
  if (!spec.ok()) {
    return absl::DataLossError(
        absl::StrCat("job journal: job '", r.id, "' has a spec this frostd cannot read: ", spec.status().message()));
  }
  r.spec = *std::move(spec);
  r.created_unix = sqlite3_column_double(s, 8);
  r.started_unix = sqlite3_column_double(s, 9);
  r.finished_unix = sqlite3_column_double(s, 10);
  r.attempts = sqlite3_column_int(s, 11);
  if (const std::string p = column_text(s, 12); !p.empty()) r.progress = progress_from_json(p);
  r.artifact = column_text(s, 13);
  r.report_json = column_text(s, 14);
  r.checkpoint_path = column_text(s, 15);
  return r;
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
  StmtPtr insert, by_id, by_key, update, count;
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
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::Status Journal::error(const char* op, int rc) const { return sqlite_error(path_, op, rc, db_); }

std::string Journal::new_id() { return absl::StrFormat("job-%012x", rng_() & uint64_t{0xFFFFFFFFFFFF}); }

absl::StatusOr<std::unique_ptr<Journal>> Journal::open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("job journal: empty path");
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("job journal: path contains a NUL byte");
  }
  FROST_RETURN_IF_ERROR(check_path(path));
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status st = sqlite_error(path, "open", rc, db);
    sqlite3_close_v2(db);
    return st;
  }
  std::unique_ptr<Journal> j(new Journal(path, db));
  sqlite3_busy_timeout(db, 10000);
  FROST_RETURN_IF_ERROR(j->init_schema());
  FROST_RETURN_IF_ERROR(j->prepare_statements());
  return j;
}

absl::Status Journal::init_schema() {
  // A statement that is not a "no such table" kind of failure means the file is unusable.
  auto not_a_journal = [&](const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat("job journal ", path_, ": not a frost job journal (", why, ")"));
  };
  // Reads one integer; SQLITE_NOTADB (garbage bytes) and SQLITE_CORRUPT become not_a_journal.
  auto query_int = [&](const char* sql, int64_t* out) -> absl::Status {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr);
    StmtPtr s(raw);
    if (rc == SQLITE_OK) rc = sqlite3_step(s.get());
    if (rc == SQLITE_ROW) {
      *out = sqlite3_column_int64(s.get(), 0);
      return absl::OkStatus();
    }
    if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT)
      return not_a_journal(sqlite3_errmsg(db_));
    return error(sql, rc);
  };
  auto exec = [&](const char* what, const char* sql) -> absl::Status {
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? absl::OkStatus() : error(what, rc);
  };
  // Inspect before writing anything, so that a foreign file is left exactly as it was.
  int64_t tables = 0, app_id = 0, version = 0;
  FROST_RETURN_IF_ERROR(query_int("SELECT count(*) FROM sqlite_master", &tables));
  FROST_RETURN_IF_ERROR(query_int("PRAGMA application_id", &app_id));
  FROST_RETURN_IF_ERROR(query_int("PRAGMA user_version", &version));
  const bool fresh = tables == 0 && app_id == 0 && version == 0;
  if (!fresh) {
    if (app_id != kApplicationId) {
      return not_a_journal(absl::StrFormat("application_id 0x%x, %d tables", app_id, tables));
    }
    if (version != kSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrCat("job journal ", path_, ": schema version ", version,
                                                        " is not supported (this build reads version ",
                                                        kSchemaVersion, ")"));
    }
  }
  {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_, "PRAGMA journal_mode=WAL", -1, &raw, nullptr);
    StmtPtr s(raw);
    if (rc == SQLITE_OK) rc = sqlite3_step(s.get());
    if (rc != SQLITE_ROW) return error("PRAGMA journal_mode=WAL", rc);
    const std::string mode = column_text(s.get(), 0);
    if (mode != "wal") {
      return absl::FailedPreconditionError(
          absl::StrCat("job journal ", path_, ": cannot use WAL mode (journal_mode is '", mode, "')"));
    }
  }
  FROST_RETURN_IF_ERROR(exec("PRAGMA synchronous=FULL", "PRAGMA synchronous=FULL"));
  if (fresh) {
    FROST_RETURN_IF_ERROR(exec("begin schema transaction", "BEGIN IMMEDIATE"));
    // Another process may have created the schema since the check above.
    absl::Status st = query_int("SELECT count(*) FROM sqlite_master", &tables);
    if (st.ok() && tables == 0) {
      st = exec("create schema", kSchema);
      if (st.ok()) {
        st = exec("set schema version", absl::StrCat("PRAGMA application_id=", kApplicationId,
                                                     ";PRAGMA user_version=", kSchemaVersion)
                                            .c_str());
      }
    }
    if (st.ok()) st = exec("commit schema", "COMMIT");
    if (!st.ok()) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return st;
    }
    FROST_RETURN_IF_ERROR(query_int("PRAGMA application_id", &app_id));
    FROST_RETURN_IF_ERROR(query_int("PRAGMA user_version", &version));
    if (app_id != kApplicationId || version != kSchemaVersion) {
      return not_a_journal(
          absl::StrFormat("application_id 0x%x, version %d after creation", app_id, version));
    }
  }
  return absl::OkStatus();
}

absl::Status Journal::prepare_statements() {
  auto st = std::make_unique<Statements>();
  auto prep = [&](StmtPtr* out, const std::string& sql) -> absl::Status {
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    out->reset(raw);
    if (rc == SQLITE_OK) return absl::OkStatus();
    // A journal with our application_id and version but without the expected columns.
    if ((rc & 0xff) == SQLITE_ERROR) {
      return absl::FailedPreconditionError(
          absl::StrCat("job journal ", path_, ": not a frost job journal (", sqlite3_errmsg(db_), ")"));
    }
    return error("prepare", rc);
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
  FROST_RETURN_IF_ERROR(prep(&st->by_id, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE id = ?1")));
  FROST_RETURN_IF_ERROR(
      prep(&st->by_key, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE idempotency_key = ?1")));
  FROST_RETURN_IF_ERROR(prep(&st->update,
                             "UPDATE jobs SET state = ?2, reason = ?3, started_unix = ?4, finished_unix = ?5,"
                             " attempts = ?6, progress_json = ?7, artifact = ?8, report_json = ?9,"
                             " checkpoint_path = ?10 WHERE id = ?1"));
  FROST_RETURN_IF_ERROR(prep(&st->count, "SELECT state, count(*) FROM jobs GROUP BY state"));
  stmts_ = std::move(st);
  return absl::OkStatus();
}

absl::StatusOr<Journal::Inserted> Journal::insert(JobRecord job) {
  job.kind = job_kind_name(job.spec);  // the kind is the spec's
  std::lock_guard<std::mutex> lock(mu_);
  auto run = [&](sqlite3_stmt* s, const char* op) -> absl::Status {
    StmtScope scope(s);
    const int rc = sqlite3_step(s);
    return rc == SQLITE_DONE ? absl::OkStatus() : error(op, rc);
  };
  FROST_RETURN_IF_ERROR(run(stmts_->begin.get(), "insert: begin"));
  // Rolls back unless committed.
  bool committed = false;
  struct Rollback {
    Journal* j;
    bool* committed;
    ~Rollback() {
      if (!*committed) {
        StmtScope scope(j->stmts_->rollback.get());
        sqlite3_step(j->stmts_->rollback.get());
      }
    }
  } rollback{this, &committed};

  // BEGIN IMMEDIATE holds the database's write lock, so no other connection can add the key
  // between this lookup and the INSERT.
  if (!job.idempotency_key.empty()) {
    FROST_ASSIGN_OR_RETURN(std::optional<JobRecord> existing, find_by_key_locked(job.idempotency_key));
    if (existing) return Inserted{*std::move(existing), false};
  }

  job.state = JobState::kQueued;
  job.created_unix = now_unix();
  sqlite3_stmt* s = stmts_->insert.get();
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
    if (rc == SQLITE_OK) rc = bind_text(s, 7, spec_to_json(job.spec));
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
  FROST_RETURN_IF_ERROR(run(stmts_->commit.get(), "insert: commit"));
  committed = true;
  return Inserted{std::move(job), true};
}

absl::StatusOr<std::optional<JobRecord>> Journal::find_by_key_locked(const std::string& key) const {
  sqlite3_stmt* s = stmts_->by_key.get();
  StmtScope scope(s);
  int rc = bind_text(s, 1, key);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    FROST_ASSIGN_OR_RETURN(JobRecord existing, read_row(s));
    return std::optional<JobRecord>(std::move(existing));
  }
  if (rc != SQLITE_DONE) return error("look up idempotency key", rc);
  return std::optional<JobRecord>();
}

absl::StatusOr<std::optional<JobRecord>> Journal::find_by_idempotency_key(const std::string& key) const {
  if (key.empty()) return std::optional<JobRecord>();
  std::lock_guard<std::mutex> lock(mu_);
  return find_by_key_locked(key);
}

absl::StatusOr<JobRecord> Journal::get_locked(const std::string& id) const {
  sqlite3_stmt* s = stmts_->by_id.get();
  StmtScope scope(s);
  int rc = bind_text(s, 1, id);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return read_row(s);
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("job '", id, "' not found"));
  return error("get", rc);
}

absl::StatusOr<JobRecord> Journal::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return get_locked(id);
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

  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, nullptr);
  StmtPtr s(raw);
  if (rc != SQLITE_OK) return error("list: prepare", rc);
  int idx = 1;
  for (JobState st : q.states) {
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(s.get(), idx++, static_cast<int>(st));
  }
  if (rc == SQLITE_OK && !q.kind.empty()) rc = bind_text(s.get(), idx++, q.kind);
  if (rc == SQLITE_OK && q.before_seq > 0) rc = sqlite3_bind_int64(s.get(), idx++, q.before_seq);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int(s.get(), idx++, q.limit);
  if (rc != SQLITE_OK) return error("list: bind", rc);
  std::vector<JobRecord> out;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    FROST_ASSIGN_OR_RETURN(JobRecord r, read_row(s.get()));
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return error("list", rc);
  return out;
}

absl::Status Journal::update(const JobRecord& job) {
  if (!valid_state(static_cast<int>(job.state))) {
    return absl::InvalidArgumentError(
        absl::StrCat("update job '", job.id, "': unknown state ", static_cast<int>(job.state)));
  }
  std::lock_guard<std::mutex> lock(mu_);
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
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) return error("update", rc);
  // Autocommit: the single UPDATE is committed (and, with synchronous=FULL, synced) by now.
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("job '", job.id, "' not found"));
  return absl::OkStatus();
}

absl::StatusOr<std::map<JobState, int64_t>> Journal::count_by_state() const {
  std::map<JobState, int64_t> out;
  for (int v = 1; v <= 6; ++v) out[static_cast<JobState>(v)] = 0;
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_stmt* s = stmts_->count.get();
  StmtScope scope(s);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const int state = sqlite3_column_int(s, 0);
    if (!valid_state(state)) {
      return absl::DataLossError(absl::StrCat("job journal ", path_, ": jobs with unknown state ", state));
    }
    out[static_cast<JobState>(state)] = sqlite3_column_int64(s, 1);
  }
  if (rc != SQLITE_DONE) return error("count_by_state", rc);
  return out;
}

}  // namespace frost::jobs
