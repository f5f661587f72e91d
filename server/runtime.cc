#include "server/runtime.h"

#include <ATen/Parallel.h>

#include <pthread.h>

#include <cctype>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/jobs/kv_repair_job.h"
#include "core/jobs/kvsplice_job.h"
#include "core/jobs/prototype_job.h"
#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/serving/prototype_kind.h"

namespace frost::server {

namespace {

// Errors of the volume under jobs.state_dir (full, read-only, unwritable, failing), after which frostd serves
// without jobs rather than not at all. Not: another frostd holding the lock (FAILED_PRECONDITION), a path of
// the wrong kind (INVALID_ARGUMENT) or a damaged journal (DATA_LOSS) — those need a person and stop the start.
bool is_storage_error(const absl::Status& st) {
  return absl::IsResourceExhausted(st) || absl::IsPermissionDenied(st) || absl::IsUnavailable(st);
}

// The writable half of the state directory: its lock (taken when *lock is empty) and the artifact store opened
// read-write into *store.
absl::Status open_writable_state(const std::string& dir, std::unique_ptr<serving::StateDirLock>* lock,
                                 std::unique_ptr<serving::ArtifactStore>* store) {
  if (!*lock) {
    FROST_ASSIGN_OR_RETURN(*lock, serving::StateDirLock::acquire(dir));
  }
  FROST_ASSIGN_OR_RETURN(*store, serving::ArtifactStore::open(dir + "/artifacts"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::create(const ServerConfig& cfg, Metrics* metrics,
                                                         const Authenticator* auth) {
  std::unique_ptr<serving::StateDirLock> lock;
  std::unique_ptr<serving::ArtifactStore> store;
  absl::Status unavailable;
  if (cfg.jobs.enabled) {
    const absl::Status st = open_writable_state(cfg.jobs.state_dir, &lock, &store);
    if (!st.ok() && !is_storage_error(st)) return st;
    if (!st.ok()) {
      // Serve what is active from the store as it is on disk; jobs come back once the directory opens.
      unavailable = st;
      FROST_ASSIGN_OR_RETURN(store, serving::ArtifactStore::open_read_only(
                                        cfg.jobs.state_dir + "/artifacts",
                                        absl::StrCat("jobs.state_dir is unavailable (", st.message(), ")")));
    }
  } else if (!cfg.artifacts.follow_state_dir.empty()) {
    // No lock: the owner holds it; this process only reads. A store that does not exist yet (the trainer
    // has not started) serves nothing until it does.
    FROST_ASSIGN_OR_RETURN(
        store, serving::ArtifactStore::open_read_only(cfg.artifacts.follow_state_dir + "/artifacts"));
    FROST_LOG_INFO("frostd: following the artifact store %s read-only every %d ms", store->root().c_str(),
                   cfg.artifacts.follow_interval_ms);
  }
  std::unique_ptr<Runtime> rt(new Runtime(cfg, metrics, auth, std::move(lock), std::move(store)));
  if (!unavailable.ok()) rt->set_jobs_unavailable(unavailable);
  metrics->set_jobs_source([p = rt.get()] { return p->stats(); });
  return rt;
}

Runtime::Runtime(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth,
                 std::unique_ptr<serving::StateDirLock> lock, std::unique_ptr<serving::ArtifactStore> store)
    : cfg_(cfg),
      metrics_(metrics),
      auth_(auth),
      lock_(std::move(lock)),
      store_(std::move(store)),
      registry_(store_.get(), &tensors_) {
  // Predict's backbone forward: its own threads, each with model.threads intra-op threads like the engine.
  const int intra_op = cfg.model.threads;
  predict_ = std::make_unique<Executor>("frost-predict", cfg.prediction.threads, cfg.prediction.max_queued,
                                        [intra_op] {
                                          if (intra_op > 0) at::set_num_threads(intra_op);
                                        });
}

Runtime::~Runtime() {
  shutdown();
  metrics_->set_jobs_source(nullptr);
}

std::shared_ptr<const LoadedModel> Runtime::model() const {
  absl::MutexLock l(&mu_);
  return model_;
}

absl::Status Runtime::start(std::shared_ptr<const LoadedModel> model) {
  {
    absl::MutexLock l(&mu_);
    model_ = model;
  }
  registry_.set_model(model);
  const std::set<std::string> restored = registry_.restore(model);
  if (!restored.count("kv_repair") && !cfg_.engine.kv_repair.empty())
    FROST_RETURN_IF_ERROR(registry_.serve_file("kv_repair", "engine.kv_repair", cfg_.engine.kv_repair, model));
  if (!restored.count("kvsplice") && !cfg_.engine.kv_splice.empty())
    FROST_RETURN_IF_ERROR(registry_.serve_file("kvsplice", "engine.kv_splice", cfg_.engine.kv_splice, model));
  if (cfg_.engine.kv_codec == KvCodecKind::kKvSplice && registry_.active_name("kvsplice").empty()) {
    FROST_LOG_WARN(
        "frostd: engine.kv_codec is kvsplice but no KVSplice is active: requests without kv.codec fail "
        "FAILED_PRECONDITION until a kvsplice artifact is activated (or engine.kv_splice is set)");
  }
  if (store_ && store_->read_only() && !cfg_.jobs.enabled) start_follower();
  if (!cfg_.jobs.enabled) return absl::OkStatus();
  if (jobs_unavailable().ok()) {
    absl::Status st = open_jobs(model);
    if (!st.ok() && !is_storage_error(st)) return st;
    if (!st.ok()) set_jobs_unavailable(st);
  }
  if (!jobs_unavailable().ok()) {
    if (jobs_listener_) jobs_listener_(false);
    start_state_retry();
  }
  return absl::OkStatus();
}

absl::Status Runtime::open_jobs(const std::shared_ptr<const LoadedModel>& model) {
  if (store_ == nullptr || store_->read_only()) {
    std::unique_ptr<serving::ArtifactStore> rw;
    FROST_RETURN_IF_ERROR(open_writable_state(cfg_.jobs.state_dir, &lock_, &rw));
    registry_.set_store(rw.get());
    if (store_) retired_stores_.push_back(std::move(store_));
    store_ = std::move(rw);
  }

  jobs::SchedulerOptions so;
  so.state_dir = cfg_.jobs.state_dir;
  so.max_queued = cfg_.jobs.max_queued;
  so.concurrency = cfg_.jobs.concurrency;
  so.threads = cfg_.jobs.threads;
  so.nice = cfg_.jobs.nice;
  so.checkpoint_every = cfg_.jobs.checkpoint_every;
  so.max_attempts = cfg_.jobs.max_attempts;
  jobs::PrototypeJobOptions po;
  po.data_root = cfg_.jobs.data_root;
  po.model = model;
  po.store = store_.get();
  po.max_inline_rows = cfg_.jobs.max_inline_rows;
  po.max_inline_bytes = cfg_.jobs.max_inline_bytes;
  std::map<std::string, std::shared_ptr<jobs::JobKind>> kinds;
  kinds["prototype"] = std::make_shared<jobs::PrototypeJobKind>(po);
  jobs::KvRepairJobOptions ko;
  ko.data_root = cfg_.jobs.data_root;
  ko.model = model;
  ko.store = store_.get();
  kinds["kv_repair"] = std::make_shared<jobs::KvRepairJobKind>(ko);
  jobs::KvSpliceJobOptions so_splice;
  so_splice.data_root = cfg_.jobs.data_root;
  so_splice.model = model;
  so_splice.store = store_.get();
  kinds["kvsplice"] = std::make_shared<jobs::KvSpliceJobKind>(so_splice);
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<jobs::Scheduler> s,
                         jobs::Scheduler::create(so, std::move(kinds), &registry_));
  s->start();
  scheduler_ = std::move(s);
  scheduler_ptr_.store(scheduler_.get(), std::memory_order_release);
  return absl::OkStatus();
}

absl::Status Runtime::jobs_unavailable() const {
  absl::MutexLock l(&mu_);
  return jobs_unavailable_;
}

void Runtime::set_jobs_unavailable(const absl::Status& why) {
  absl::MutexLock l(&mu_);
  jobs_unavailable_ =
      why.ok() ? why
               : absl::UnavailableError(absl::StrCat("training jobs are unavailable: jobs.state_dir \"",
                                                     cfg_.jobs.state_dir, "\" cannot be used (", why.message(),
                                                     "); retrying every ", cfg_.jobs.state_retry_s, " s"));
  if (!why.ok()) FROST_LOG_ERROR("frostd: %s; serving continues", std::string(jobs_unavailable_.message()).c_str());
}

std::thread Runtime::start_periodic(const char* name, absl::Duration every, std::function<bool()> tick) {
  return std::thread([this, name, every, tick = std::move(tick)] {
    pthread_setname_np(pthread_self(), name);
    absl::MutexLock l(&follow_mu_);
    while (!follow_stop_) {
      follow_cv_.WaitWithTimeout(&follow_mu_, every);
      if (follow_stop_) break;
      follow_mu_.Unlock();  // loading an artifact or opening the journal must not hold up shutdown's signal
      const bool done = tick();
      follow_mu_.Lock();
      if (done) break;
    }
  });
}

void Runtime::start_state_retry() {
  state_retry_ = start_periodic("frost-stateretry", absl::Seconds(cfg_.jobs.state_retry_s),
                                [this, last_error = std::string()]() mutable {
                                  absl::Status st = open_jobs(model());
                                  if (st.ok()) {
                                    set_jobs_unavailable(absl::OkStatus());
                                    FROST_LOG_INFO("frostd: jobs.state_dir \"%s\" opened: training jobs are "
                                                   "available again",
                                                   cfg_.jobs.state_dir.c_str());
                                    if (jobs_listener_) jobs_listener_(true);
                                    return true;
                                  }
                                  if (std::string(st.message()) != last_error) {
                                    last_error = std::string(st.message());  // once per distinct error
                                    FROST_LOG_WARN("frostd: jobs.state_dir still unavailable: %s",
                                                   last_error.c_str());
                                  }
                                  return false;
                                });
}

void Runtime::start_follower() {
  follower_ = start_periodic("frost-follow", absl::Milliseconds(cfg_.artifacts.follow_interval_ms), [this] {
    registry_.follow(model());
    return false;
  });
}

void Runtime::shutdown() {
  {
    absl::MutexLock l(&follow_mu_);
    follow_stop_ = true;
    follow_cv_.SignalAll();
  }
  if (follower_.joinable()) follower_.join();
  if (state_retry_.joinable()) state_retry_.join();
  if (scheduler_) scheduler_->shutdown();
  predict_->shutdown();
}

absl::StatusOr<serving::ArtifactInfo> Runtime::activate(const std::string& name) {
  return registry_.activate(name, model());
}

JobsStats Runtime::stats() const {
  JobsStats s;
  s.jobs_available = cfg_.jobs.enabled && scheduler() != nullptr;
  if (jobs::Scheduler* sched = scheduler()) {
    jobs::Scheduler::Counts c = sched->counts();
    for (jobs::JobState st :
         {jobs::JobState::kQueued, jobs::JobState::kRunning, jobs::JobState::kSucceeded,
          jobs::JobState::kFailed, jobs::JobState::kCancelled, jobs::JobState::kInterrupted}) {
      std::string name = jobs::job_state_name(st);
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      auto it = c.by_state.find(st);
      s.jobs_by_state[name] = it == c.by_state.end() ? 0 : it->second;
    }
    for (const auto& [id, p] : sched->running_progress()) {
      s.job_running = true;
      s.job_loss = p.loss;
      s.job_examples_per_s = p.examples_per_s;
      break;
    }
  }
  s.store_bytes = tensors_.bytes_by_device();
  s.artifact_swaps = registry_.swaps();
  s.artifact_swap_failures = registry_.swap_failures();
  return s;
}

}  // namespace frost::server
