#pragma once
// frost.v1.Prediction, frost.v1.Training and frost.v1.Admin on the gRPC callback API, over the
// jobs runtime (core/jobs): state-directory lock, journal + scheduler, artifact store, tensor
// store and the active prototype artifact.
//
// All methods are raw (ByteBuffer) like Generate, so a request with invalid UTF-8 in a string
// gets INVALID_ARGUMENT naming the field (server/proto_codec.h). Every method first passes the
// Authenticator (server/auth.h), then validates its request.
//
// Predict runs on the gRPC callback thread: it holds the ServedPrototype it started with for the
// whole call, so an activation mid-request does not affect it, and the response names that
// version. WatchJob is a write reactor fed by Scheduler::subscribe; progress events that arrive
// while a write is in flight are coalesced (the latest snapshot wins; a terminal state is always
// delivered last).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/jobs/artifact_store.h"
#include "core/jobs/scheduler.h"
#include "core/jobs/serving.h"
#include "core/jobs/state_dir.h"
#include "core/kv/kvsplice.h"
#include "frost/v1/admin.grpc.pb.h"
#include "frost/v1/prediction.grpc.pb.h"
#include "frost/v1/training.grpc.pb.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace frost::server {

// Everything the three services share. Created by FrostServer::start (lock, store) and completed
// by FrostServer::load_model (model, scheduler, persisted activation).
class JobsRuntime {
 public:
  // Locks cfg.jobs.state_dir and opens the artifact store (when jobs are enabled).
  static absl::StatusOr<std::unique_ptr<JobsRuntime>> create(const ServerConfig& cfg, Metrics* metrics,
                                                             const Authenticator* auth);
  ~JobsRuntime();

  // With the served model: re-activates the persisted active prototype artifact (a failure is logged
  // and serving continues without one), opens the journal, recovers and starts the scheduler.
  absl::Status start(std::shared_ptr<const LoadedModel> model);
  // Running jobs checkpoint and return to QUEUED; workers join. Idempotent.
  void shutdown();
  void start_drain() { draining_.store(true); }

  // Loads, verifies, persists as active, then swaps `name` in. FAILED_PRECONDITION when it cannot be
  // served; NOT_FOUND for an unknown name.
  absl::StatusOr<jobs::ArtifactInfo> activate(const std::string& name);

  const ServerConfig& cfg() const { return cfg_; }
  Metrics* metrics() const { return metrics_; }
  const Authenticator* auth() const { return auth_; }
  jobs::ArtifactStore* store() const { return store_.get(); }
  jobs::TensorStore& tensors() { return tensors_; }
  jobs::PrototypeServing& prototypes() { return prototypes_; }
  // The KV repair operator Generate applies (kv_repair artifacts and engine.kv_repair fill it).
  RepairSlot& kv_repair() { return kv_repair_; }
  // The KVSplice Generate stores kv.codec = "kvsplice" sequences with (kvsplice artifacts and
  // engine.kv_splice fill it).
  KvSpliceSlot& kv_splice() { return kv_splice_; }
  // nullptr until start() (or when jobs are disabled).
  jobs::Scheduler* scheduler() const { return scheduler_.get(); }
  std::shared_ptr<const LoadedModel> model() const;
  bool draining() const { return draining_.load(); }
  JobsStats stats() const;

 private:
  JobsRuntime(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth)
      : cfg_(cfg), metrics_(metrics), auth_(auth), prototypes_(&tensors_) {}

  ServerConfig cfg_;
  Metrics* metrics_;
  const Authenticator* auth_;
  std::unique_ptr<jobs::StateDirLock> lock_;
  std::unique_ptr<jobs::ArtifactStore> store_;
  jobs::TensorStore tensors_;
  jobs::PrototypeServing prototypes_;
  RepairSlot kv_repair_;
  std::atomic<int64_t> kv_repair_swaps_{0}, kv_repair_swap_failures_{0};
  KvSpliceSlot kv_splice_;
  std::atomic<int64_t> kv_splice_swaps_{0}, kv_splice_swap_failures_{0};
  std::unique_ptr<jobs::Scheduler> scheduler_;
  std::atomic<bool> draining_{false};
  mutable absl::Mutex mu_;
  std::shared_ptr<const LoadedModel> model_ ABSL_GUARDED_BY(mu_);
  absl::Mutex activate_mu_;  // one activation at a time
};

using PredictionServiceBase = v1::Prediction::WithRawCallbackMethod_Predict<v1::Prediction::Service>;

class PredictionService final : public PredictionServiceBase {
 public:
  explicit PredictionService(JobsRuntime* rt) : rt_(rt) {}
  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

 private:
  JobsRuntime* rt_;
};

using TrainingServiceBase =
    v1::Training::WithRawCallbackMethod_SubmitJob<v1::Training::WithRawCallbackMethod_GetJob<
        v1::Training::WithRawCallbackMethod_ListJobs<v1::Training::WithRawCallbackMethod_CancelJob<
            v1::Training::WithRawCallbackMethod_WatchJob<v1::Training::Service>>>>>;

class TrainingService final : public TrainingServiceBase {
 public:
  explicit TrainingService(JobsRuntime* rt) : rt_(rt) {}
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;

 private:
  class WatchCall;
  JobsRuntime* rt_;
};

using AdminServiceBase = v1::Admin::WithRawCallbackMethod_GetServerInfo<
    v1::Admin::WithRawCallbackMethod_ListArtifacts<v1::Admin::WithRawCallbackMethod_ActivateArtifact<
        v1::Admin::WithRawCallbackMethod_DeleteArtifact<v1::Admin::Service>>>>;

class AdminService final : public AdminServiceBase {
 public:
  explicit AdminService(JobsRuntime* rt) : rt_(rt) {}
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListArtifacts(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ActivateArtifact(grpc::CallbackServerContext* ctx,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteArtifact(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                           grpc::ByteBuffer* response) override;

 private:
  JobsRuntime* rt_;
};

// JobRecord → frost.v1.Job (progress JSON → JobProgress); without spec_json when !with_spec
// (WatchJob events: the spec can hold megabytes of inline rows and is sent per progress step).
v1::Job to_proto(const jobs::JobRecord& j, bool with_spec = true);
// frost.v1.PrototypeJobSpec → the prototype kind's spec JSON (core/jobs/prototype_job.h).
std::string prototype_spec_json(const v1::PrototypeJobSpec& spec);
// frost.v1.KvRepairJobSpec / KvSpliceJobSpec → the kv_repair / kvsplice kinds' spec JSON
// (core/jobs/kv_repair_job.h, core/jobs/kvsplice_job.h).
std::string kv_repair_spec_json(const v1::KvRepairJobSpec& spec);
std::string kvsplice_spec_json(const v1::KvSpliceJobSpec& spec);

}  // namespace frost::server
