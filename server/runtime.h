#pragma once
// Runtime: what the Prediction, Training and Admin services share — the served model's life cycle
// (core/serving/served_model.h: state directory, artifact store, registry, restore / fallback / follow,
// degraded read-only mode), the job scheduler, and the Predict executor. Created by FrostServer::start
// (ServedModel::create: lock, store) and completed by FrostServer::load_model (ServedModel::start with the
// model; the scheduler opens once the state directory is writable).
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/jobs/scheduler.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"
#include "core/serving/registry.h"
#include "core/serving/served_model.h"
#include "core/serving/tensor_store.h"
#include "server/auth.h"
#include "server/executor.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace frost::server {

class Runtime {
 public:
  // ServedModel::create from the config: locks cfg.jobs.state_dir and opens the artifact store (when jobs are
  // enabled), or follows artifacts.follow_state_dir.
  static absl::StatusOr<std::unique_ptr<Runtime>> create(const ServerConfig& cfg, Metrics* metrics,
                                                         const Authenticator* auth);
  ~Runtime();

  // ServedModel::start with the served model (restore, fallback, follow); once the state directory is
  // writable it opens the journal, recovers and starts the scheduler.
  absl::Status start(std::shared_ptr<const LoadedModel> model);
  // Running jobs checkpoint and return to QUEUED; workers join; queued Predicts end UNAVAILABLE.
  // Idempotent.
  void shutdown();
  void start_drain() { draining_.store(true); }

  // Registry::activate with the served model (the Admin RPC; jobs with activate=true call the registry).
  absl::StatusOr<serving::ArtifactInfo> activate(const std::string& name) {
    return registry().activate(name);
  }

  const ServerConfig& cfg() const { return cfg_; }
  Metrics* metrics() const { return metrics_; }
  const Authenticator* auth() const { return auth_; }
  serving::ArtifactStore* store() const { return served_->store(); }  // read-write once jobs.state_dir opens
  serving::Registry& registry() { return served_->registry(); }
  serving::TensorStore& tensors() { return served_->tensors(); }
  // Where Predict runs its backbone forward (never on a gRPC thread).
  Executor& predict_executor() { return *predict_; }
  // nullptr until start() (or when jobs are disabled, or while the state directory is unavailable).
  jobs::Scheduler* scheduler() const { return scheduler_ptr_.load(std::memory_order_acquire); }
  // Why jobs are unavailable although enabled (the state directory could not be opened for writing: a full,
  // read-only or unwritable volume), OK otherwise. While it is not OK frostd serves Generate and Predict of what
  // is active (the artifact store opened read-only), Training answers UNAVAILABLE with this reason, readiness
  // of frost.v1.Training is NOT_SERVING and frost_jobs_available 0; every jobs.state_retry_s the state
  // directory is tried again, and jobs become available without a restart once it opens.
  absl::Status jobs_unavailable() const { return served_->writable(); }
  // Called with false when jobs become unavailable and true when they become available (FrostServer: the
  // readiness of frost.v1.Training). Set before start().
  void set_jobs_listener(std::function<void(bool)> f) { served_->set_writable_listener(std::move(f)); }
  std::shared_ptr<const LoadedModel> model() const { return served_->model(); }
  bool draining() const { return draining_.load(); }
  JobsStats stats() const;

 private:
  Runtime(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth,
          std::unique_ptr<serving::ServedModel> served);

  // ServedModel's writable hook: the scheduler over the writable store (once; later calls find it open).
  absl::Status open_jobs(serving::ArtifactStore& store);

  ServerConfig cfg_;
  Metrics* metrics_;
  const Authenticator* auth_;
  std::unique_ptr<serving::ServedModel> served_;
  std::unique_ptr<Executor> predict_;
  std::unique_ptr<jobs::Scheduler> scheduler_;  // destroyed before served_ (it calls the registry)
  std::atomic<jobs::Scheduler*> scheduler_ptr_{nullptr};
  std::atomic<bool> draining_{false};
};

}  // namespace frost::server
