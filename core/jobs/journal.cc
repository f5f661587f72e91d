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
#include "core/common/fs.h"
#include "core/common/sha256.h"
#include "core/common/status_macros.h"

namespace frost::jobs {

namespace {

// PRAGMA application_id ('FRSJ') and PRAGMA user_version of the schema below. Version 2 added row_sha (version 1
// journals are migrated when opened).
constexpr int32_t kApplicationId = 0x4652534A;
constexpr int32_t kSchemaVersion = 2;

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
    " checkpoint_path TEXT NOT NULL,"
    " row_sha TEXT NOT NULL DEFAULT '');"
    "CREATE UNIQUE INDEX jobs_idempotency_key ON jobs(idempotency_key);"
    "CREATE INDEX jobs_state_seq ON jobs(state, seq);"
    "CREATE INDEX jobs_kind_seq ON jobs(kind, seq);";

// Column order read by read_raw().
constexpr const char* kColumns =
    "seq, id, kind, state, reason, priority, idempotency_key, spec_json, created_unix, started_unix,"
    " finished_unix, attempts, progress_json, artifact, report_json, checkpoint_path, row_sha";

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

// One write transaction through the prepared BEGIN IMMEDIATE / COMMIT / ROLLBACK statements: once begin()
// succeeded, it is rolled back at scope exit unless commit() succeeded. Each returns the sqlite3_step code
// (SQLITE_DONE on success).
class WriteTxn {
 public:
  WriteTxn(sqlite3_stmt* begin, sqlite3_stmt* commit, sqlite3_stmt* rollback)
      : begin_(begin), commit_(commit), rollback_(rollback) {}
  ~WriteTxn() {
    if (open_) step(rollback_);
  }
  WriteTxn(const WriteTxn&) = delete;
  WriteTxn& operator=(const WriteTxn&) = delete;
  int begin() {
    const int rc = step(begin_);
    open_ = rc == SQLITE_DONE;
    return rc;
  }
  int commit() {
    const int rc = step(commit_);
    if (rc == SQLITE_DONE) open_ = false;
    return rc;
  }

 private:
  static int step(sqlite3_stmt* s) {
    StmtScope scope(s);
    return sqlite3_step(s);
  }
  sqlite3_stmt *begin_, *commit_, *rollback_;
  bool open_ = false;
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
    return absl::DataLossError(
        absl::StrCat("job journal: job '", r.id, "' has a spec this frostd cannot read: ", spec.status().message()));
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

// A row read back: its checksum checked, then parsed.
absl::StatusOr<JobRecord> read_row(sqlite3_stmt* s, const std::string& path) {
  const RawRow raw = read_raw(s);
  FROST_RETURN_IF_ERROR(check_row(path, raw));
  return parse_row(raw);
}

// The stored form of a record (what insert / update bind).
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
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    // A new journal is created whole under a temporary name and linked in place, so an existing empty file
    // is never a journal being created: it is one that lost its contents.
    FROST_RETURN_IF_ERROR(create(path));
  } else if (st.st_size == 0) {
    return absl::DataLossError(absl::StrCat("job journal ", path,
                                            ": empty file (a truncated journal?); frostd does not start on it: "
                                            "restore it, or move it away to start with no jobs"));
  }
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<Journal> j, open_existing(path, /*create=*/false));
  FROST_RETURN_IF_ERROR(j->init_schema());
  FROST_RETURN_IF_ERROR(j->prepare_statements());
  return j;
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::open_existing(const std::string& path, bool create) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (create ? SQLITE_OPEN_CREATE : 0),
                                 nullptr);
  if (rc != SQLITE_OK) {
    absl::Status st = sqlite_error(path, "open", rc, db);
    sqlite3_close_v2(db);
    return st;
  }
  std::unique_ptr<Journal> j(new Journal(path, db));
  sqlite3_busy_timeout(db, 10000);
  return j;
}

absl::Status Journal::create(const std::string& path) {
  const std::string tmp = absl::StrFormat("%s.new-%d-%x", path, ::getpid(),
                                          static_cast<unsigned>(std::random_device{}()));
  auto remove_tmp = [&] {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((tmp + suffix).c_str());
  };
  {
    FROST_ASSIGN_OR_RETURN(std::unique_ptr<Journal> j, open_existing(tmp, /*create=*/true));
    if (absl::Status st = j->init_schema(); !st.ok()) {
      j.reset();
      remove_tmp();
      return st;
    }
  }  // closed: the schema is committed and checkpointed into the file
  // link() fails if the journal appeared meanwhile (another process created it): that one is kept.
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  remove_tmp();
  if (rc != 0 && err != EEXIST) {
    return absl::Status(errno_code(err), absl::StrCat("job journal ", path, ": cannot create: ", std::strerror(err)));
  }
  fsync_dir(parent_dir(path));
  return absl::OkStatus();
}

absl::Status Journal::init_schema() {
  // A statement that is not a "no such table" kind of failure means the file is unusable.
  auto not_a_journal = [&](const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat("job journal ", path_, ": not a frost job journal (", why, ")"));
  };
  // Reads one integer; SQLITE_NOTADB (garbage bytes) becomes not_a_journal, SQLITE_CORRUPT (a damaged
  // SQLite file) DATA_LOSS.
  auto query_int = [&](const char* sql, int64_t* out) -> absl::Status {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr);
    StmtPtr s(raw);
    if (rc == SQLITE_OK) rc = sqlite3_step(s.get());
    if (rc == SQLITE_ROW) {
      *out = sqlite3_column_int64(s.get(), 0);
      return absl::OkStatus();
    }
    if ((rc & 0xff) == SQLITE_NOTADB) return not_a_journal(sqlite3_errmsg(db_));
    if ((rc & 0xff) == SQLITE_CORRUPT) {
      return absl::DataLossError(absl::StrCat("job journal ", path_, ": damaged (", sqlite3_errmsg(db_),
                                              "); frostd does not start on it: restore it, or move it away to "
                                              "start with no jobs"));
    }
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
    if (version != kSchemaVersion && version != 1) {
      return absl::FailedPreconditionError(absl::StrCat("job journal ", path_, ": schema version ", version,
                                                        " is not supported (this build reads version ",
                                                        kSchemaVersion, ")"));
    }
    // A damaged journal is refused before anything is written to it.
    FROST_RETURN_IF_ERROR(verify(version));
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
  if (!fresh && version == 1) FROST_RETURN_IF_ERROR(migrate_v1());
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

absl::Status Journal::verify(int64_t version) {
  auto damaged = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("job journal ", path_, ": damaged (", why,
                                            "); frostd does not start on it: restore it, or move it away to start "
                                            "with no jobs"));
  };
  // A file cut short: SQLite writes whole pages.
  struct stat st {};
  int64_t page_size = 0;
  {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_, "PRAGMA page_size", -1, &raw, nullptr);
    StmtPtr s(raw);
    if (rc == SQLITE_OK) rc = sqlite3_step(s.get());
    if (rc != SQLITE_ROW) return error("PRAGMA page_size", rc);
    page_size = sqlite3_column_int64(s.get(), 0);
  }
  if (::stat(path_.c_str(), &st) == 0 && page_size > 0 && st.st_size % page_size != 0) {
    return damaged(absl::StrCat(st.st_size, " bytes is not a whole number of ", page_size, "-byte pages"));
  }
  // The structure: b-trees, indexes against the table, free list.
  {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_, "PRAGMA integrity_check(8)", -1, &raw, nullptr);
    StmtPtr s(raw);
    std::string problems;
    if (rc == SQLITE_OK) rc = sqlite3_step(s.get());
    for (; rc == SQLITE_ROW; rc = sqlite3_step(s.get())) {
      const std::string line = column_text(s.get(), 0);
      if (line != "ok") absl::StrAppend(&problems, problems.empty() ? "" : "; ", line);
    }
    if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB) return damaged(sqlite3_errmsg(db_));
    if (rc != SQLITE_DONE) return error("PRAGMA integrity_check", rc);
    if (!problems.empty()) return damaged(absl::StrCat("integrity_check: ", problems));
  }
  if (version < 2) return absl::OkStatus();  // no checksums yet: migrate_v1() adds them
  // Every row against its checksum, and readable.
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs").c_str(), -1, &raw, nullptr);
  StmtPtr s(raw);
  if ((rc & 0xff) == SQLITE_ERROR) return not_a_journal_error(sqlite3_errmsg(db_));
  if (rc == SQLITE_OK) rc = sqlite3_step(s.get());
  for (; rc == SQLITE_ROW; rc = sqlite3_step(s.get())) {
    absl::StatusOr<JobRecord> row = read_row(s.get(), path_);
    if (!row.ok()) return damaged(std::string(row.status().message()));
  }
  if ((rc & 0xff) == SQLITE_CORRUPT) return damaged(sqlite3_errmsg(db_));
  if (rc != SQLITE_DONE) return error("verify rows", rc);
  return absl::OkStatus();
}

absl::Status Journal::not_a_journal_error(const std::string& why) const {
  return absl::FailedPreconditionError(absl::StrCat("job journal ", path_, ": not a frost job journal (", why, ")"));
}

absl::Status Journal::migrate_v1() {
  auto exec = [&](const char* what, const char* sql) -> absl::Status {
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? absl::OkStatus() : error(what, rc);
  };
  FROST_RETURN_IF_ERROR(exec("migrate: begin", "BEGIN IMMEDIATE"));
  absl::Status st = exec("migrate: add row_sha", "ALTER TABLE jobs ADD COLUMN row_sha TEXT NOT NULL DEFAULT ''");
  std::vector<RawRow> rows;
  if (st.ok()) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs").c_str(), -1, &raw, nullptr);
    StmtPtr s(raw);
    if ((rc & 0xff) == SQLITE_ERROR) {
      st = not_a_journal_error(sqlite3_errmsg(db_));
    } else {
      if (rc == SQLITE_OK) rc = sqlite3_step(s.get());
      for (; rc == SQLITE_ROW; rc = sqlite3_step(s.get())) rows.push_back(read_raw(s.get()));
      if (rc != SQLITE_DONE) st = error("migrate: read", rc);
    }
  }
  if (st.ok()) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db_, "UPDATE jobs SET row_sha = ?1 WHERE seq = ?2", -1, &raw, nullptr);
    StmtPtr s(raw);
    for (const RawRow& r : rows) {
      if (rc != SQLITE_OK) break;
      StmtScope scope(s.get());
      rc = bind_text(s.get(), 1, row_checksum(r));
      if (rc == SQLITE_OK) rc = sqlite3_bind_int64(s.get(), 2, r.seq);
      if (rc == SQLITE_OK) rc = sqlite3_step(s.get()) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db_);
    }
    if (rc != SQLITE_OK) st = error("migrate: checksums", rc);
  }
  if (st.ok()) st = exec("migrate: version", absl::StrCat("PRAGMA user_version=", kSchemaVersion).c_str());
  if (st.ok()) st = exec("migrate: commit", "COMMIT");
  if (!st.ok()) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return st;
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
  FROST_RETURN_IF_ERROR(prep(&st->set_sha, "UPDATE jobs SET row_sha = ?1 WHERE seq = ?2"));
  FROST_RETURN_IF_ERROR(prep(&st->by_id, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE id = ?1")));
  FROST_RETURN_IF_ERROR(
      prep(&st->by_key, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE idempotency_key = ?1")));
  FROST_RETURN_IF_ERROR(prep(&st->update,
                             "UPDATE jobs SET state = ?2, reason = ?3, started_unix = ?4, finished_unix = ?5,"
                             " attempts = ?6, progress_json = ?7, artifact = ?8, report_json = ?9,"
                             " checkpoint_path = ?10, row_sha = ?11 WHERE id = ?1"));
  FROST_RETURN_IF_ERROR(prep(&st->count, "SELECT state, count(*) FROM jobs GROUP BY state"));
  stmts_ = std::move(st);
  return absl::OkStatus();
}

absl::StatusOr<Journal::Inserted> Journal::insert(JobRecord job) {
  job.kind = job_kind_name(job.spec);  // the kind is the spec's
  std::lock_guard<std::mutex> lock(mu_);
  WriteTxn txn(stmts_->begin.get(), stmts_->commit.get(), stmts_->rollback.get());  // rolls back unless committed
  if (const int rc = txn.begin(); rc != SQLITE_DONE) return error("insert: begin", rc);

  // BEGIN IMMEDIATE holds the database's write lock, so no other connection can add the key
  // between this lookup and the INSERT.
  if (!job.idempotency_key.empty()) {
    FROST_ASSIGN_OR_RETURN(std::optional<JobRecord> existing, find_by_key_locked(job.idempotency_key));
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

absl::StatusOr<std::optional<JobRecord>> Journal::find_by_key_locked(const std::string& key) const {
  sqlite3_stmt* s = stmts_->by_key.get();
  StmtScope scope(s);
  int rc = bind_text(s, 1, key);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    FROST_ASSIGN_OR_RETURN(JobRecord existing, read_row(s, path_));
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
  if (rc == SQLITE_ROW) return read_row(s, path_);
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
    FROST_ASSIGN_OR_RETURN(JobRecord r, read_row(s.get(), path_));
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
  WriteTxn txn(stmts_->begin.get(), stmts_->commit.get(), stmts_->rollback.get());  // rolls back unless committed
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
