#pragma once
// Runtime: what the Prediction, Training and Admin services share — the state-directory lock, the
// artifact store, the served-artifacts registry (core/serving/registry.h: what Predict and Generate
// serve), the job scheduler, the served model, and the Predict executor. Created by FrostServer::start
// (lock, store) and completed by FrostServer::load_model (model, scheduler, persisted activations).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/jobs/scheduler.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"
#include "core/serving/registry.h"
#include "core/serving/state_dir_lock.h"
#include "core/serving/tensor_store.h"
#include "server/auth.h"
#include "server/executor.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace frost::server {

class Runtime {
 public:
  // Locks cfg.jobs.state_dir and opens the artifact store (when jobs are enabled).
  static absl::StatusOr<std::unique_ptr<Runtime>> create(const ServerConfig& cfg, Metrics* metrics,
                                                         const Authenticator* auth);
  ~Runtime();

  // With the served model: re-activates the persisted active artifacts (one that cannot be served is logged
  // and its kind serves nothing), serves engine.kv_repair / engine.kv_splice when no artifact of that kind
  // is active, opens the journal, recovers and starts the scheduler.
  absl::Status start(std::shared_ptr<const LoadedModel> model);
  // Running jobs checkpoint and return to QUEUED; workers join; queued Predicts end UNAVAILABLE.
  // Idempotent.
  void shutdown();
  void start_drain() { draining_.store(true); }

  // Registry::activate with the served model (the Admin RPC and jobs with activate=true).
  absl::StatusOr<serving::ArtifactInfo> activate(const std::string& name);

  const ServerConfig& cfg() const { return cfg_; }
  Metrics* metrics() const { return metrics_; }
  const Authenticator* auth() const { return auth_; }
  serving::ArtifactStore* store() const { return registry_.store(); }  // read-write once jobs.state_dir opens
  serving::Registry& registry() { return registry_; }
  serving::TensorStore& tensors() { return tensors_; }
  // Where Predict runs its backbone forward (never on a gRPC thread).
  Executor& predict_executor() { return *predict_; }
  // nullptr until start() (or when jobs are disabled, or while the state directory is unavailable).
  jobs::Scheduler* scheduler() const { return scheduler_ptr_.load(std::memory_order_acquire); }
  // Why jobs are unavailable although enabled (the state directory could not be opened for writing: a full,
  // read-only or unwritable volume), OK otherwise. While it is not OK frostd serves Generate and Predict of what
  // is active (the artifact store opened read-only), Training answers UNAVAILABLE with this reason, readiness
  // of frost.v1.Training is NOT_SERVING and frost_jobs_available 0; every jobs.state_retry_s the state
  // directory is tried again, and jobs become available without a restart once it opens.
  absl::Status jobs_unavailable() const;
  // Called with false when jobs become unavailable and true when they become available (FrostServer: the
  // readiness of frost.v1.Training). Set before start().
  void set_jobs_listener(std::function<void(bool)> f) { jobs_listener_ = std::move(f); }
  std::shared_ptr<const LoadedModel> model() const;
  bool draining() const { return draining_.load(); }
  JobsStats stats() const;

 private:
  Runtime(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth,
          std::unique_ptr<serving::StateDirLock> lock, std::unique_ptr<serving::ArtifactStore> store);

  // artifacts.follow_state_dir: a thread re-reads the owner's ACTIVE markers every follow_interval_ms.
  void start_follower();
  // The writable half of jobs: the state directory lock, the artifact store read-write, the scheduler (each
  // step only when missing). A storage error (is_storage_error) leaves jobs unavailable, not frostd down.
  absl::Status open_jobs(const std::shared_ptr<const LoadedModel>& model);
  void set_jobs_unavailable(const absl::Status& why);
  // Retries open_jobs every jobs.state_retry_s until it succeeds or shutdown.
  void start_state_retry();
  // A thread named `name` that calls `tick` every `every` (outside follow_mu_) until it returns true or
  // shutdown() stops it: the follower and the state-directory retry.
  std::thread start_periodic(const char* name, absl::Duration every, std::function<bool()> tick);

  ServerConfig cfg_;
  Metrics* metrics_;
  const Authenticator* auth_;
  std::unique_ptr<serving::StateDirLock> lock_;
  std::unique_ptr<serving::ArtifactStore> store_;
  serving::TensorStore tensors_;
  serving::Registry registry_;
  std::unique_ptr<Executor> predict_;
  std::unique_ptr<jobs::Scheduler> scheduler_;
  std::atomic<jobs::Scheduler*> scheduler_ptr_{nullptr};
  std::vector<std::unique_ptr<serving::ArtifactStore>>
      retired_stores_;  // replaced ones (readers may hold them)
  std::function<void(bool)> jobs_listener_;
  std::atomic<bool> draining_{false};
  std::thread follower_, state_retry_;
  absl::Mutex follow_mu_;
  absl::CondVar follow_cv_;
  bool follow_stop_ ABSL_GUARDED_BY(follow_mu_) = false;
  mutable absl::Mutex mu_;
  std::shared_ptr<const LoadedModel> model_ ABSL_GUARDED_BY(mu_);
  absl::Status jobs_unavailable_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost::server
