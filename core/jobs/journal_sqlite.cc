// The job journal's SQLite plumbing (journal_sqlite.h): SQLite result codes mapped to Status codes, and text
// binding and reading.
#include "core/jobs/journal_sqlite.h"

#include "absl/strings/str_cat.h"
#include "core/common/errno_status.h"

namespace frost::jobs::journal_detail {

namespace {

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

}  // namespace

absl::Status sqlite_error(const std::string& path, const char* op, int rc, sqlite3* db) {
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const int sys = db != nullptr ? sqlite3_system_errno(db) : 0;
  return absl::Status(code_for_sqlite(rc, sys), absl::StrCat("job journal ", path, ": ", op, ": ", msg));
}

int bind_text(sqlite3_stmt* s, int i, const std::string& v) {
  return sqlite3_bind_text64(s, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
}

std::string column_text(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  const int n = sqlite3_column_bytes(s, i);
  return p != nullptr ? std::string(p, static_cast<size_t>(n)) : std::string();
}

}  // namespace frost::jobs::journal_detail
