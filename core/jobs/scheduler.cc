#include "core/jobs/scheduler.h"

#include <ATen/Parallel.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace frost::jobs {

namespace {

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
double now_mono() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Retries of journal writes that failed (disk full): from kMinBackoff, doubling, up to kMaxBackoff.
constexpr std::chrono::milliseconds kMinBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{5000};

// Queue order: higher priority first, then submit order.
bool runs_before(int32_t pa, int64_t sa, int32_t pb, int64_t sb) { return pa != pb ? pa > pb : sa < sb; }

}  // namespace

Scheduler::Scheduler(SchedulerOptions opts, std::map<std::string, std::shared_ptr<JobKind>> kinds,
                     std::unique_ptr<Journal> journal, serving::Registry* registry)
    : opts_(std::move(opts)), kinds_(std::move(kinds)), journal_(std::move(journal)), registry_(registry) {}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::create(
    SchedulerOptions opts, std::map<std::string, std::shared_ptr<JobKind>> kinds,
    serving::Registry* registry) {
  if (opts.concurrency < 1 || opts.threads < 1 || opts.max_queued < 1 || opts.max_attempts < 1)
    return absl::InvalidArgumentError(
        "scheduler: concurrency, threads, max_queued and max_attempts must be >= 1");
  FROST_RETURN_IF_ERROR(make_dirs(opts.state_dir + "/jobs"));
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<Journal> journal, Journal::open(opts.state_dir + "/jobs.db"));
  std::unique_ptr<Scheduler> s(
      new Scheduler(std::move(opts), std::move(kinds), std::move(journal), registry));
  FROST_RETURN_IF_ERROR(s->recover());
  return s;
}

Scheduler::~Scheduler() { shutdown(); }

std::string Scheduler::job_dir(const std::string& id) const { return opts_.state_dir + "/jobs/" + id; }

absl::Status Scheduler::recover() {
  // Jobs a killed process left RUNNING: resume, or INTERRUPTED after too many starts.
  ListQuery q;
  q.states = {JobState::kRunning};
  q.limit = 1 << 30;
  FROST_ASSIGN_OR_RETURN(std::vector<JobRecord> stale, journal_->list(q));
  for (JobRecord& j : stale) {
    if (j.attempts >= opts_.max_attempts) {
      j.state = JobState::kInterrupted;
      j.reason = absl::StrCat("the server stopped while the job ran, ", j.attempts,
                              " times (max_attempts=", opts_.max_attempts, "); not resumed again");
      j.finished_unix = now_unix();
    } else {
      j.state = JobState::kQueued;
      j.reason = absl::StrCat("resumed after an unclean server stop (attempt ", j.attempts + 1, " of ",
                              opts_.max_attempts, ")");
    }
    FROST_RETURN_IF_ERROR(journal_->update(j));
    FROST_LOG_WARN("job %s: %s", j.id.c_str(), j.reason.c_str());
  }
  q.states = {JobState::kQueued};
  FROST_ASSIGN_OR_RETURN(std::vector<JobRecord> queued, journal_->list(q));
  // The one count from the journal: every later change is one the scheduler commits itself.
  absl::StatusOr<std::map<JobState, int64_t>> by_state = journal_->count_by_state();
  if (!by_state.ok()) return by_state.status();
  {
    std::lock_guard<std::mutex> v(view_mu_);
    counts_.by_state = *std::move(by_state);
  }
  std::lock_guard<std::mutex> l(mu_);
  for (const JobRecord& j : queued) queue_.push_back({j.priority, j.seq, j.id});
  count_sizes_locked();
  return absl::OkStatus();
}

void Scheduler::start() {
  std::lock_guard<std::mutex> l(mu_);
  if (!workers_.empty() || stopping_) return;
  for (int i = 0; i < opts_.concurrency; ++i) workers_.emplace_back([this] { worker_loop(); });
}

void Scheduler::shutdown() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    for (auto& [id, r] : running_) r.cancel->cancel();
    workers.swap(workers_);
  }
  cv_.notify_all();
  stop_cv_.notify_all();
  for (std::thread& t : workers) t.join();
}

absl::StatusOr<JobRecord> Scheduler::submit(const JobSpec& spec, int32_t priority,
                                            const std::string& idempotency_key) {
  const std::string kind = job_kind_name(spec);
  auto it = kinds_.find(kind);
  if (it == kinds_.end()) {
    std::string known;
    for (const auto& [k, v] : kinds_) absl::StrAppend(&known, known.empty() ? "" : "|", k);
    return absl::InvalidArgumentError(
        absl::StrCat("kind: unknown job kind \"", kind, "\" (expected ", known, ")"));
  }
  if (priority < -100 || priority > 100)
    return absl::InvalidArgumentError(absl::StrCat("priority: ", priority, " is outside [-100, 100]"));
  if (idempotency_key.size() > 128)
    return absl::InvalidArgumentError(
        absl::StrCat("idempotency_key: ", idempotency_key.size(), " bytes is longer than 128"));
  // A retried submit: answer with the first job without validating the spec again.
  FROST_ASSIGN_OR_RETURN(std::optional<JobRecord> first, journal_->find_by_idempotency_key(idempotency_key));
  if (first) return *std::move(first);
  FROST_ASSIGN_OR_RETURN(JobSpec normalised, it->second->prepare(spec));
  if (normalised.index() != spec.index())
    return absl::InternalError(absl::StrCat("job kind ", kind, ": prepare() returned another kind's spec"));
  JobRecord j;
  j.kind = kind;
  j.priority = priority;
  j.idempotency_key = idempotency_key;
  j.spec = std::move(normalised);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return absl::UnavailableError("the server is shutting down");
    if (static_cast<int32_t>(queue_.size()) >= opts_.max_queued)
      return absl::ResourceExhaustedError(absl::StrCat("the job queue is full (", queue_.size(),
                                                       " queued, jobs.max_queued=", opts_.max_queued, ")"));
    FROST_ASSIGN_OR_RETURN(Journal::Inserted ins, journal_->insert(std::move(j)));
    if (!ins.inserted) return ins.job;  // lost a race with the same key
    queue_.push_back({ins.job.priority, ins.job.seq, ins.job.id});
    {
      std::lock_guard<std::mutex> v(view_mu_);
      ++counts_.by_state[JobState::kQueued];
    }
    count_sizes_locked();
    j = ins.job;
  }
  cv_.notify_one();
  return j;
}

absl::StatusOr<JobRecord> Scheduler::get(const std::string& id) const {
  FROST_ASSIGN_OR_RETURN(JobRecord j, journal_->get(id));
  std::lock_guard<std::mutex> v(view_mu_);
  auto it = shown_.find(id);
  if (it != shown_.end() && it->second.unjournaled_end) return *it->second.unjournaled_end;
  if (it != shown_.end() && it->second.progress) j.progress = it->second.progress;
  return j;
}

absl::StatusOr<std::vector<JobRecord>> Scheduler::list(const ListQuery& q) const {
  FROST_ASSIGN_OR_RETURN(std::vector<JobRecord> out, journal_->list(q));
  std::lock_guard<std::mutex> v(view_mu_);
  std::vector<JobRecord> shown;
  shown.reserve(out.size());
  for (JobRecord& j : out) {
    auto it = shown_.find(j.id);
    if (it != shown_.end() && it->second.unjournaled_end) {
      const JobRecord& end = *it->second.unjournaled_end;
      if (q.states.empty() || std::find(q.states.begin(), q.states.end(), end.state) != q.states.end())
        shown.push_back(end);
      continue;
    }
    if (it != shown_.end() && it->second.progress) j.progress = it->second.progress;
    shown.push_back(std::move(j));
  }
  return shown;
}

absl::StatusOr<JobRecord> Scheduler::cancel(const std::string& id) {
  JobRecord j;
  {
    std::lock_guard<std::mutex> l(mu_);
    FROST_ASSIGN_OR_RETURN(j, journal_->get(id));
    if (is_terminal(j.state))
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " already ended (", job_state_name(j.state), ")"));
    auto rit = running_.find(id);
    if (rit != running_.end()) {
      rit->second.user_cancelled = true;
      rit->second.cancel->cancel();
      return j;  // RUNNING until the job stops at its next step
    }
    auto qit = std::find_if(queue_.begin(), queue_.end(), [&](const Queued& q) { return q.id == id; });
    if (qit != queue_.end()) queue_.erase(qit);
    count_sizes_locked();
    const JobState from = j.state;
    j.state = JobState::kCancelled;
    j.reason = "cancelled while queued";
    j.finished_unix = now_unix();
    FROST_RETURN_IF_ERROR(journal_->update(j));
    count_change(from, j.state);
  }
  notify(j);
  return j;
}

uint64_t Scheduler::subscribe(const std::string& id, std::function<void(const JobRecord&)> f) {
  std::lock_guard<std::mutex> l(sub_mu_);
  const uint64_t t = next_sub_++;
  subs_.emplace(id, std::make_pair(t, std::move(f)));
  return t;
}

void Scheduler::unsubscribe(uint64_t token) {
  std::lock_guard<std::mutex> l(sub_mu_);
  for (auto it = subs_.begin(); it != subs_.end(); ++it)
    if (it->second.first == token) {
      subs_.erase(it);
      return;
    }
}

void Scheduler::notify(const JobRecord& job) {
  std::lock_guard<std::mutex> l(sub_mu_);
  auto [b, e] = subs_.equal_range(job.id);
  for (auto it = b; it != e; ++it) it->second.second(job);
}

Scheduler::Counts Scheduler::counts() const {
  std::lock_guard<std::mutex> v(view_mu_);
  return counts_;
}

void Scheduler::count_change(JobState from, JobState to) {
  if (from == to) return;
  std::lock_guard<std::mutex> v(view_mu_);
  --counts_.by_state[from];
  ++counts_.by_state[to];
}

void Scheduler::count_sizes_locked() {
  std::lock_guard<std::mutex> v(view_mu_);
  counts_.queued = static_cast<int64_t>(queue_.size());
  counts_.running = static_cast<int64_t>(running_.size());
}

void Scheduler::set_shown(const std::string& id, const std::function<void(Shown&)>& f) {
  std::lock_guard<std::mutex> v(view_mu_);
  f(shown_[id]);
}

void Scheduler::drop_shown(const std::string& id) {
  std::lock_guard<std::mutex> v(view_mu_);
  shown_.erase(id);
}

std::map<std::string, JobProgress> Scheduler::running_progress() const {
  std::map<std::string, JobProgress> out;
  std::lock_guard<std::mutex> v(view_mu_);
  for (const auto& [id, r] : shown_)
    if (r.progress) out[id] = *r.progress;
  return out;
}

void Scheduler::worker_loop() {
  // This thread's share of the machine: lower priority, its own OpenMP budget. The first parallel
  // region initialises the thread's OpenMP settings from LibTorch's global count; ours replaces it.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), opts_.nice);
  at::parallel_for(0, 1, 1, [](int64_t, int64_t) {});
  omp_set_num_threads(opts_.threads);
  std::chrono::milliseconds start_backoff = kMinBackoff;
  for (;;) {
    std::string id;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      auto best = std::min_element(queue_.begin(), queue_.end(), [](const Queued& a, const Queued& b) {
        return runs_before(a.priority, a.seq, b.priority, b.seq);
      });
      id = best->id;
      queue_.erase(best);
      running_[id].cancel = std::make_shared<CancelToken>();
      count_sizes_locked();
    }
    absl::StatusOr<JobRecord> j = journal_->get(id);
    if (!j.ok()) {
      FROST_LOG_ERROR("job %s: cannot read from the journal: %s", id.c_str(), j.status().ToString().c_str());
      std::lock_guard<std::mutex> l(mu_);
      running_.erase(id);
      count_sizes_locked();
      continue;
    }
    if (run_one(*std::move(j))) {
      start_backoff = kMinBackoff;
    } else {
      // The journal could not record the start (e.g. the disk is full): the job is queued again; wait
      // before the next try instead of spinning on it.
      if (!backoff(start_backoff)) return;
      start_backoff = std::min(2 * start_backoff, kMaxBackoff);
    }
  }
}

bool Scheduler::backoff(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> l(mu_);
  return !stop_cv_.wait_for(l, d, [&] { return stopping_; });
}

bool Scheduler::run_one(JobRecord job) {
  std::shared_ptr<CancelToken> cancel;
  {
    std::lock_guard<std::mutex> l(mu_);
    cancel = running_[job.id].cancel;
  }
  const JobState queued_state = job.state;  // QUEUED in the journal
  job.state = JobState::kRunning;
  job.attempts += 1;
  if (job.started_unix == 0) job.started_unix = now_unix();
  const std::string dir = job_dir(job.id);
  job.checkpoint_path = dir + "/checkpoint.safetensors";
  absl::Status st = make_dirs(dir);
  if (st.ok()) st = journal_->update(job);  // RUNNING is committed before any work
  if (!st.ok()) {
    FROST_LOG_ERROR("job %s: cannot start: %s", job.id.c_str(), st.ToString().c_str());
    std::lock_guard<std::mutex> l(mu_);
    running_.erase(job.id);
    queue_.push_back({job.priority, job.seq, job.id});  // retried; the journal still says QUEUED
    count_sizes_locked();
    return false;
  }
  count_change(queued_state, job.state);
  notify(job);
  FROST_LOG_INFO("job %s (%s) started, attempt %d", job.id.c_str(), job.kind.c_str(), job.attempts);

  JobContext ctx;
  ctx.job_id = job.id;
  ctx.cancel = cancel.get();
  ctx.checkpoint_path = job.checkpoint_path;
  ctx.checkpoint_every = opts_.checkpoint_every;
  double last_commit = 0;
  ctx.progress = [&](const JobProgress& p) {
    set_shown(job.id, [&](Shown& v) { v.progress = p; });
    job.progress = p;
    const double t = now_mono();
    if (t - last_commit >= opts_.progress_commit_s) {
      last_commit = t;
      if (absl::Status s = journal_->update(job); !s.ok())
        FROST_LOG_WARN("job %s: progress not journaled: %s", job.id.c_str(), s.ToString().c_str());
    }
    notify(job);
  };

  absl::StatusOr<JobResult> r = kinds_.at(job.kind)->run(job, ctx);

  bool user_cancelled = false, stopping = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    user_cancelled = running_[job.id].user_cancelled;
    stopping = stopping_;
  }
  bool keep_checkpoint = false;
  if (r.ok()) {
    job.state = JobState::kSucceeded;
    job.artifact = r->artifact;
    job.report_json = r->report_json;
    job.reason.clear();
    if (r->activate && registry_) {
      if (absl::Status s = registry_->activate(r->artifact).status(); !s.ok())
        job.reason = absl::StrCat("succeeded, but activation failed: ", s.message());
    }
  } else if (absl::IsCancelled(r.status()) && !user_cancelled && stopping) {
    job.state = JobState::kQueued;  // shutdown: resume from the checkpoint at the next start
    job.reason = "server shut down while running; resumes from its checkpoint";
    keep_checkpoint = true;
  } else if (absl::IsCancelled(r.status())) {
    job.state = JobState::kCancelled;
    job.reason = "cancelled while running";
  } else {
    job.state = JobState::kFailed;
    job.reason = std::string(r.status().message());
  }
  if (job.state != JobState::kQueued) job.finished_unix = now_unix();
  if (!keep_checkpoint) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    job.checkpoint_path.clear();
  }
  // The outcome must reach the journal: otherwise it says RUNNING (to GetJob now, and to the next start,
  // which would run the job again). A failed write (the disk is full) is retried until it succeeds, and
  // get() / list() show the outcome meanwhile; a shutdown first leaves the job as a crash would.
  absl::Status js = journal_->update(job);
  if (!js.ok()) {
    FROST_LOG_ERROR("job %s: final state %s not journaled, retrying: %s", job.id.c_str(),
                    job_state_name(job.state), js.ToString().c_str());
    set_shown(job.id, [&](Shown& v) { v.unjournaled_end = job; });
    for (std::chrono::milliseconds d = kMinBackoff; !js.ok(); d = std::min(2 * d, kMaxBackoff)) {
      if (!backoff(d)) break;
      js = journal_->update(job);
    }
    if (js.ok()) {
      FROST_LOG_INFO("job %s: final state journaled", job.id.c_str());
    } else {
      FROST_LOG_ERROR("job %s: final state %s not journaled before shutdown (the next start sees it RUNNING): %s",
                      job.id.c_str(), job_state_name(job.state), js.ToString().c_str());
    }
  }
  if (js.ok()) count_change(JobState::kRunning, job.state);  // else the journal still says RUNNING
  FROST_LOG_INFO("job %s %s%s%s", job.id.c_str(), job_state_name(job.state), job.reason.empty() ? "" : ": ",
                 job.reason.c_str());
  {
    std::lock_guard<std::mutex> l(mu_);
    running_.erase(job.id);
    count_sizes_locked();
  }
  drop_shown(job.id);
  notify(job);
  return true;
}

}  // namespace frost::jobs
