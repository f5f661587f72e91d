#pragma once
// Runtime: what the Prediction, Training and Admin services share — the state-directory lock, the
// artifact store, the served-artifacts registry (core/serving/registry.h: what Predict and Generate
// serve), the job scheduler, the served model, and the Predict executor. Created by FrostServer::start
// (lock, store) and completed by FrostServer::load_model (model, scheduler, persisted activations).
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/jobs/artifact_store.h"
#include "core/jobs/scheduler.h"
#include "core/jobs/state_dir.h"
#include "core/model/model_loader.h"
#include "core/serving/registry.h"
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
  absl::StatusOr<jobs::ArtifactInfo> activate(const std::string& name);

  const ServerConfig& cfg() const { return cfg_; }
  Metrics* metrics() const { return metrics_; }
  const Authenticator* auth() const { return auth_; }
  jobs::ArtifactStore* store() const { return store_.get(); }
  serving::Registry& registry() { return registry_; }
  serving::TensorStore& tensors() { return tensors_; }
  // Where Predict runs its backbone forward (never on a gRPC thread).
  Executor& predict_executor() { return *predict_; }
  // nullptr until start() (or when jobs are disabled).
  jobs::Scheduler* scheduler() const { return scheduler_.get(); }
  std::shared_ptr<const LoadedModel> model() const;
  bool draining() const { return draining_.load(); }
  JobsStats stats() const;

 private:
  Runtime(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth,
          std::unique_ptr<jobs::StateDirLock> lock, std::unique_ptr<jobs::ArtifactStore> store);

  // artifacts.follow_state_dir: a thread re-reads the owner's ACTIVE markers every follow_interval_ms.
  void start_follower();

  ServerConfig cfg_;
  Metrics* metrics_;
  const Authenticator* auth_;
  std::unique_ptr<jobs::StateDirLock> lock_;
  std::unique_ptr<jobs::ArtifactStore> store_;
  serving::TensorStore tensors_;
  serving::Registry registry_;
  std::unique_ptr<Executor> predict_;
  std::unique_ptr<jobs::Scheduler> scheduler_;
  std::atomic<bool> draining_{false};
  std::thread follower_;
  absl::Mutex follow_mu_;
  absl::CondVar follow_cv_;
  bool follow_stop_ ABSL_GUARDED_BY(follow_mu_) = false;
  mutable absl::Mutex mu_;
  std::shared_ptr<const LoadedModel> model_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost::server
