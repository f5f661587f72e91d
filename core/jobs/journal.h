#pragma once
// The job journal: one SQLite database (WAL, synchronous=FULL) holding every job the server
// accepted, so that a restart can tell the user what happened to each one. Every write is in a
// committed transaction before the call returns.
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/jobs/job_spec.h"

struct sqlite3;
struct sqlite3_stmt;

namespace frost::jobs {

// Stored as these integers; do not renumber.
enum class JobState : int {
  kQueued = 1,
  kRunning = 2,
  kSucceeded = 3,
  kFailed = 4,
  kCancelled = 5,
  kInterrupted = 6,
};

// "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED" ("UNKNOWN" otherwise).
const char* job_state_name(JobState s);
// SUCCEEDED, FAILED, CANCELLED and INTERRUPTED.
bool is_terminal(JobState s);

struct JobRecord {
  std::string id;    // assigned by insert(): "job-" + 12 lowercase hex characters
  std::string kind;  // job_kind_name(spec), e.g. "prototype"
  JobState state = JobState::kQueued;
  std::string reason;
  int32_t priority = 0;
  std::string idempotency_key;  // "" = none
  JobSpec spec;  // the normalised spec (stored as JSON)
  double created_unix = 0, started_unix = 0, finished_unix = 0;
  int32_t attempts = 0;
  std::optional<JobProgress> progress;  // the last progress reported (stored as JSON)
  std::string artifact;       // "" or "prototype/3"
  std::string report_json;
  std::string checkpoint_path;  // "" or a path
  int64_t seq = 0;              // SQLite rowid: submit order, assigned by insert()
};

struct ListQuery {
  std::vector<JobState> states;  // empty = every state
  std::string kind;              // "" = every kind
  int32_t limit = 50;            // must be > 0
  int64_t before_seq = 0;        // 0 = from the newest; otherwise only seq < before_seq
};

class Journal {
 public:
  // Opens or creates the database at `path` (the directory must exist). A new journal is created
  // whole (schema, PRAGMA application_id and PRAGMA user_version) under a temporary name, then
  // linked in place. FAILED_PRECONDITION naming the path when the file is not a frost job journal
  // (not SQLite, another schema, another version); DATA_LOSS naming it when it is one that is
  // damaged: empty, cut short, failing PRAGMA integrity_check, or a row that does not match its
  // checksum (row_sha, written with every row and checked whenever one is read). Such files are
  // left untouched. A version 1 journal is migrated (row_sha added). NOT_FOUND /
  // PERMISSION_DENIED naming the path when the directory is missing or not writable.
  static absl::StatusOr<std::unique_ptr<Journal>> open(const std::string& path);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::string& path() const { return path_; }

  // Inserts `job` in one committed transaction; id, seq and created_unix are assigned here, kind is
  // job_kind_name(job.spec) and state is forced to QUEUED. When job.idempotency_key is non-empty and a job with that key
  // exists, returns that job with inserted=false and inserts nothing (race-free across threads
  // and processes).
  struct Inserted {
    JobRecord job;
    bool inserted;
  };
  absl::StatusOr<Inserted> insert(JobRecord job);

  // NOT_FOUND "job '<id>' not found".
  absl::StatusOr<JobRecord> get(const std::string& id) const;
  // The job submitted with this idempotency key (nullopt when none, or when `key` is empty).
  absl::StatusOr<std::optional<JobRecord>> find_by_idempotency_key(const std::string& key) const;

  // Newest first (seq DESC), at most q.limit rows. INVALID_ARGUMENT for limit <= 0 or
  // before_seq < 0.
  absl::StatusOr<std::vector<JobRecord>> list(const ListQuery& q) const;

  // Writes the mutable fields (state, reason, started_unix, finished_unix, attempts,
  // progress, artifact, report_json, checkpoint_path) of the job with job.id; committed
  // before return. kind, priority, idempotency_key, spec, created_unix and seq are not
  // changed. NOT_FOUND "job '<id>' not found".
  absl::Status update(const JobRecord& job);

  // Number of jobs in each state; every JobState is present (0 when none).
  absl::StatusOr<std::map<JobState, int64_t>> count_by_state() const;

 private:
  struct Statements;
  Journal(std::string path, sqlite3* db);
  static absl::StatusOr<std::unique_ptr<Journal>> open_existing(const std::string& path, bool create);
  // A new journal: created and given its schema under a temporary name, then linked to `path`.
  static absl::Status create(const std::string& path);
  absl::Status init_schema();
  // Refuses a damaged file (DATA_LOSS naming it): cut short, failing integrity_check, or (version 2) a row
  // that does not match its row_sha.
  absl::Status verify(int64_t version);
  absl::Status migrate_v1();  // adds row_sha (version 1 -> 2)
  absl::Status not_a_journal_error(const std::string& why) const;
  absl::Status prepare_statements(sqlite3* db, std::unique_ptr<Statements>* out);
  // The read connection (rdb_, rstmts_), opened once the file is verified.
  absl::Status open_reader();
  absl::Status error(const char* op, int rc) const;       // on db_
  absl::Status read_error(const char* op, int rc) const;  // on rdb_
  std::string new_id();
  absl::StatusOr<std::optional<JobRecord>> find_by_key_locked(const Statements& stmts, sqlite3* db,
                                                              const std::string& key) const;

  const std::string path_;
  sqlite3* db_ = nullptr;  // writes (insert, update), and the reads inside a write transaction
  std::unique_ptr<Statements> stmts_;
  mutable std::mutex mu_;  // guards db_, stmts_ and rng_
  std::mt19937_64 rng_;
  // get, find_by_idempotency_key, list and count_by_state: a second connection, so that in WAL mode they read
  // the last commit without waiting for a writer (mu_ is held through a synchronous=FULL commit).
  sqlite3* rdb_ = nullptr;
  std::unique_ptr<Statements> rstmts_;
  mutable std::mutex rmu_;  // guards rdb_ and rstmts_
};

}  // namespace frost::jobs
