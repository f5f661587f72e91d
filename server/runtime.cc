#include "server/runtime.h"

#include <ATen/Parallel.h>

#include <cctype>

#include "core/common/status_macros.h"
#include "core/jobs/kv_repair_job.h"
#include "core/jobs/kvsplice_job.h"
#include "core/jobs/prototype_job.h"

namespace frost::server {

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::create(const ServerConfig& cfg, Metrics* metrics,
                                                         const Authenticator* auth) {
  serving::ServedModelOptions so;
  if (cfg.jobs.enabled) so.state_dir = cfg.jobs.state_dir;
  so.state_retry_s = cfg.jobs.state_retry_s;
  so.follow_state_dir = cfg.artifacts.follow_state_dir;
  so.follow_interval_ms = cfg.artifacts.follow_interval_ms;
  so.kv_repair_file = cfg.engine.kv_repair;
  so.kv_splice_file = cfg.engine.kv_splice;
  so.kvsplice_codec_default = cfg.engine.kv_codec == KvCodecKind::kKvSplice;
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<serving::ServedModel> served, serving::ServedModel::create(so));
  std::unique_ptr<Runtime> rt(new Runtime(cfg, metrics, auth, std::move(served)));
  metrics->set_jobs_source([p = rt.get()] { return p->stats(); });
  return rt;
}

Runtime::Runtime(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth,
                 std::unique_ptr<serving::ServedModel> served)
    : cfg_(cfg), metrics_(metrics), auth_(auth), served_(std::move(served)) {
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

absl::Status Runtime::start(std::shared_ptr<const LoadedModel> model) {
  return served_->start(std::move(model), [this](serving::ArtifactStore& store) { return open_jobs(store); });
}

absl::Status Runtime::open_jobs(serving::ArtifactStore& store) {
  if (scheduler_) return absl::OkStatus();
  const std::shared_ptr<const LoadedModel> model = served_->model();
  serving::ArtifactStore* const store_ptr = &store;
  // The jobs section is the scheduler's options (server_config.h): no copy to keep in step.
  const jobs::SchedulerOptions& so = cfg_.jobs;
  const jobs::JobKindOptions base{cfg_.jobs.data_root, model, store_ptr};  // every kind's inputs, named once
  jobs::PrototypeJobOptions po{base};
  po.max_inline_rows = cfg_.jobs.max_inline_rows;
  po.max_inline_bytes = cfg_.jobs.max_inline_bytes;
  std::map<std::string, std::shared_ptr<jobs::JobKind>> kinds;
  kinds["prototype"] = std::make_shared<jobs::PrototypeJobKind>(po);
  kinds["kv_repair"] = std::make_shared<jobs::KvRepairJobKind>(jobs::KvRepairJobOptions{base});
  kinds["kvsplice"] = std::make_shared<jobs::KvSpliceJobKind>(jobs::KvSpliceJobOptions{base});
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<jobs::Scheduler> s,
                         jobs::Scheduler::create(so, std::move(kinds), &served_->registry()));
  s->start();
  scheduler_ = std::move(s);
  scheduler_ptr_.store(scheduler_.get(), std::memory_order_release);
  return absl::OkStatus();
}

void Runtime::shutdown() {
  served_->stop();  // the follower and the state retry (which may be opening the scheduler) end first
  if (scheduler_) scheduler_->shutdown();
  predict_->shutdown();
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
  s.store_bytes = served_->tensors().bytes_by_device();
  s.artifact_swaps = served_->registry().swaps();
  s.artifact_swap_failures = served_->registry().swap_failures();
  return s;
}

}  // namespace frost::server
