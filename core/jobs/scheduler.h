#pragma once
// Scheduler: durable training jobs on top of the SQLite Journal.
//
// Life of a job:
//   submit()  the kind validates and normalises the spec (JobKind::prepare: paths resolved under the
//             data root, every data row checked) → the job is committed to the journal as QUEUED →
//             only then is it acknowledged. A full queue (max_queued jobs QUEUED) is
//             RESOURCE_EXHAUSTED; an idempotency key seen before returns the first job.
//   run       workers (`concurrency` of them) take the highest priority, then the oldest. RUNNING,
//             attempts + 1 and started_unix are committed before the kind runs. The kind checks the
//             job's CancelToken before every step and checkpoints every `checkpoint_every` steps and
//             when it stops early.
//   end       SUCCEEDED (artifact + report), FAILED (reason), CANCELLED; committed, then watchers
//             hear it. A job that asked for activation activates its artifact in the serving registry
//             first (serving sits below jobs: the scheduler calls it directly); a refused activation is
//             recorded in the job's reason and the job still SUCCEEDED. The job's checkpoint directory is
//             removed. When the journal cannot take a write (disk full), the start is retried with a backoff
//             (the job stays QUEUED) and the outcome is retried until it is committed (get() and list() show
//             it meanwhile); a shutdown first leaves the job RUNNING in the journal, like a crash.
//   shutdown  (SIGTERM) running jobs are asked to stop, write a checkpoint and go back to QUEUED
//             ("server shut down"), so the next start resumes them.
//   crash     (kill -9, power loss) the journal still says RUNNING. create() re-queues such jobs to
//             resume from their last checkpoint (the kind gets ctx.checkpoint_path; the prototype
//             trainer's resume is bit-identical to an uninterrupted run on CPU), unless the job has
//             already been started max_attempts times: then it ends INTERRUPTED with the reason.
//             No job stays RUNNING across a restart and none is lost.
//
// Job threads: each worker runs at `nice` lower priority (Linux per-thread niceness) with an
// OpenMP budget of `threads` intra-op threads, so serving keeps the rest of the machine.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/common/cancel.h"
#include "core/jobs/journal.h"
#include "core/serving/registry.h"

namespace frost::jobs {

struct JobContext {
  std::string job_id;
  const CancelToken* cancel = nullptr;
  std::string checkpoint_path;  // resume from it when it exists; write it every checkpoint_every steps
  int64_t checkpoint_every = 0;
  // Progress report: committed to the journal at most every progress_commit_s, sent to watchers each time.
  std::function<void(const JobProgress& progress)> progress;
};

struct JobResult {
  std::string artifact;     // "prototype/3"
  std::string report_json;  // evaluation report
  bool activate = false;    // the spec asked for activation on success
};

class JobKind {
 public:
  virtual ~JobKind() = default;
  // Validates a spec of this kind at submit and returns its normalised form (what run() will get in
  // job.spec: paths resolved, defaults explicit). INVALID_ARGUMENT naming the field / file and line.
  virtual absl::StatusOr<JobSpec> prepare(const JobSpec& spec) = 0;
  // Runs the job (job.spec holds this kind's normalised spec); CANCELLED when ctx.cancel fired (after
  // checkpointing).
  virtual absl::StatusOr<JobResult> run(const JobRecord& job, const JobContext& ctx) = 0;
};

struct SchedulerOptions {
  std::string state_dir;  // journal: <state_dir>/jobs.db; checkpoints: <state_dir>/jobs/<id>/
  int32_t max_queued = 64;
  int32_t concurrency = 1;  // jobs running at once on the (single) device
  int32_t threads = 1;      // intra-op threads of a running job
  int32_t nice = 10;        // niceness added to job threads
  int64_t checkpoint_every = 50;
  int32_t max_attempts = 3;
  double progress_commit_s = 2;  // progress is written to the journal at most this often
};

class Scheduler {
 public:
  // Opens the journal and recovers jobs a killed process left RUNNING (see above). Workers start
  // with start(). `registry` (nullable; must outlive the scheduler) activates the artifacts of jobs that
  // asked for it, for the model it serves; without one such jobs only publish.
  static absl::StatusOr<std::unique_ptr<Scheduler>> create(
      SchedulerOptions opts, std::map<std::string, std::shared_ptr<JobKind>> kinds,
      serving::Registry* registry = nullptr);
  ~Scheduler();  // shutdown()

  void start();
  // Asks running jobs to checkpoint and stop (they return to QUEUED), joins the workers.
  void shutdown();

  // The kind is the spec's (job_kind_name); INVALID_ARGUMENT when this scheduler has no such kind.
  absl::StatusOr<JobRecord> submit(const JobSpec& spec, int32_t priority, const std::string& idempotency_key);
  absl::StatusOr<JobRecord> get(const std::string& id) const;
  absl::StatusOr<std::vector<JobRecord>> list(const ListQuery& q) const;
  // QUEUED → CANCELLED at once; RUNNING → its CancelToken trips (CANCELLED when it stops);
  // terminal → FAILED_PRECONDITION "job x already ended (SUCCEEDED)".
  absl::StatusOr<JobRecord> cancel(const std::string& id);

  // Calls `f` with the job after every progress report and state change, from the worker thread
  // (or the caller of cancel). Keep it short and non-blocking. Returns a token for unsubscribe().
  uint64_t subscribe(const std::string& id, std::function<void(const JobRecord&)> f);
  void unsubscribe(uint64_t token);

  // queued / running: jobs in the scheduler's queue and on its workers; by_state: the journal's jobs in each
  // state (every JobState present). From memory, never from the journal: read when the journal opens (after
  // recovery) and moved at every state change the scheduler commits, so it equals the journal's
  // count_by_state() and a caller (GetServerInfo, /metrics) never waits on disk or on a writer's commit.
  struct Counts {
    int64_t queued = 0, running = 0;
    std::map<JobState, int64_t> by_state;
  };
  Counts counts() const;
  // Progress of running jobs that reported some (for metrics): id → last progress.
  std::map<std::string, JobProgress> running_progress() const;

 private:
  // What get() and list() show of a running job beyond its journal row.
  struct Shown {
    std::optional<JobProgress> progress;
    // The job's outcome while the journal cannot take it (disk full): get() and list() show it.
    std::optional<JobRecord> unjournaled_end;
  };

  Scheduler(SchedulerOptions opts, std::map<std::string, std::shared_ptr<JobKind>> kinds,
            std::unique_ptr<Journal> journal, serving::Registry* registry);
  absl::Status recover();
  void worker_loop();
  // false when the job could not be started (its RUNNING state not journaled): it is back in the queue.
  bool run_one(JobRecord job);
  // Sleeps `d` or until shutdown; false when shutting down.
  bool backoff(std::chrono::milliseconds d);
  void notify(const JobRecord& job);
  std::string job_dir(const std::string& id) const;
  // counts_: a committed state change of one job (from = its state in the journal before the write).
  void count_change(JobState from, JobState to);
  // counts_: the queue's and the workers' sizes, after queue_ or running_ changed (mu_ held).
  void count_sizes_locked();
  // shown_: the job's entry (a running job's progress, an outcome the journal cannot take yet).
  void set_shown(const std::string& id, const std::function<void(Shown&)>& f);
  void drop_shown(const std::string& id);

  struct Queued {
    int32_t priority;
    int64_t seq;
    std::string id;
  };
  struct Running {
    std::shared_ptr<CancelToken> cancel;
    bool user_cancelled = false;
  };

  SchedulerOptions opts_;
  std::map<std::string, std::shared_ptr<JobKind>> kinds_;
  std::unique_ptr<Journal> journal_;
  serving::Registry* registry_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable stop_cv_;  // wakes backoff() at shutdown
  std::vector<Queued> queue_;               // guarded by mu_
  std::map<std::string, Running> running_;  // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  std::vector<std::thread> workers_;

  // What readers see without the journal: counts() and the overlay get() / list() put on journal rows. Its
  // own mutex, taken last and never held across a journal call (mu_ is: submit and cancel commit under it),
  // so a reader never waits on a writer's commit.
  mutable std::mutex view_mu_;
  Counts counts_;                       // guarded by view_mu_
  std::map<std::string, Shown> shown_;  // guarded by view_mu_: running jobs

  mutable std::mutex sub_mu_;
  uint64_t next_sub_ = 1;
  std::multimap<std::string, std::pair<uint64_t, std::function<void(const JobRecord&)>>> subs_;
};

}  // namespace frost::jobs
