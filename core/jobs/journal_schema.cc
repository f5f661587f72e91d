// Opening the job journal (journal.h): the path checks, creating a new journal whole under a temporary name,
// the schema, the checks that refuse a damaged or foreign file, and the migration from older versions.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/errno_status.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"
#include "core/jobs/journal.h"
#include "core/jobs/journal_rows.h"
#include "core/jobs/journal_sqlite.h"

namespace frost::jobs {
using namespace journal_detail;  // NOLINT(build/namespaces): the journal's own plumbing

namespace {

// PRAGMA application_id ('FRSJ') and PRAGMA user_version of the schema below. Version 2 added row_sha
// (version 1 journals are migrated when opened).
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

}  // namespace

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
    return absl::DataLossError(
        absl::StrCat("job journal ", path,
                     ": empty file (a truncated journal?); frostd does not start on it: "
                     "restore it, or move it away to start with no jobs"));
  }
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<Journal> j, open_existing(path, /*create=*/false));
  FROST_RETURN_IF_ERROR(j->init_schema());
  FROST_RETURN_IF_ERROR(j->prepare_statements(j->db_, &j->stmts_));
  FROST_RETURN_IF_ERROR(j->open_reader());
  return j;
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::open_existing(const std::string& path, bool create) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (create ? SQLITE_OPEN_CREATE : 0),
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
  const std::string tmp =
      absl::StrFormat("%s.new-%d-%x", path, ::getpid(), static_cast<unsigned>(std::random_device{}()));
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
    return absl::Status(errno_code(err),
                        absl::StrCat("job journal ", path, ": cannot create: ", std::strerror(err)));
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
      return absl::DataLossError(
          absl::StrCat("job journal ", path_, ": damaged (", sqlite3_errmsg(db_),
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
    return absl::DataLossError(
        absl::StrCat("job journal ", path_, ": damaged (", why,
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
  int rc =
      sqlite3_prepare_v2(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs").c_str(), -1, &raw, nullptr);
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
  return absl::FailedPreconditionError(
      absl::StrCat("job journal ", path_, ": not a frost job journal (", why, ")"));
}

absl::Status Journal::migrate_v1() {
  auto exec = [&](const char* what, const char* sql) -> absl::Status {
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    return rc == SQLITE_OK ? absl::OkStatus() : error(what, rc);
  };
  FROST_RETURN_IF_ERROR(exec("migrate: begin", "BEGIN IMMEDIATE"));
  absl::Status st =
      exec("migrate: add row_sha", "ALTER TABLE jobs ADD COLUMN row_sha TEXT NOT NULL DEFAULT ''");
  std::vector<RawRow> rows;
  if (st.ok()) {
    sqlite3_stmt* raw = nullptr;
    int rc =
        sqlite3_prepare_v2(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs").c_str(), -1, &raw, nullptr);
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

}  // namespace frost::jobs
