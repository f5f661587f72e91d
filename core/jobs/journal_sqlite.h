#pragma once
// The job journal's SQLite plumbing, shared by core/jobs/journal*.cc (not an API; journal.h is): errors that
// name the journal, scoped statement resets, the write transaction, and text binding. The journal's files:
// journal.cc (the queries), journal_schema.cc (open, create, schema, verification, migrations),
// journal_rows.cc (the stored row and its checksum), this and journal_sqlite.cc.
#include <sqlite3.h>

#include <memory>
#include <string>

#include "absl/status/status.h"

namespace frost::jobs::journal_detail {

// The Status for a failed SQLite call: its code from the SQLite (and system) error, the message naming the
// journal's path and the operation.
absl::Status sqlite_error(const std::string& path, const char* op, int rc, sqlite3* db);

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

int bind_text(sqlite3_stmt* s, int i, const std::string& v);
std::string column_text(sqlite3_stmt* s, int i);

}  // namespace frost::jobs::journal_detail
