#include "server/jobs_services.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/model/kv_dims.h"
#include "core/common/clock.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/common/utf8.h"
#include "core/jobs/kv_repair_job.h"
#include "core/jobs/kvsplice_job.h"
#include "core/jobs/prototype_job.h"
#include "server/proto_codec.h"
#include "server/status_convert.h"

namespace frost::server {

namespace {

using nlohmann::json;

double seconds_since(int64_t t0_ns) { return static_cast<double>(RealClock::get().now_ns() - t0_ns) * 1e-9; }

constexpr int kDefaultTopK = 3;
constexpr int32_t kDefaultPageSize = 50, kMaxPageSize = 1000;

// Auth, parse, handle, serialize, record: the shape of every unary method here.
template <class Req, class Resp, class F>
grpc::ServerUnaryReactor* unary(JobsRuntime* rt, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                grpc::ByteBuffer* out, const char* service, const char* rpc, F&& handler) {
  const int64_t t0 = RealClock::get().now_ns();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::Status st = rt->auth()->check(absl::StrCat("/frost.v1.", service, "/", rpc), ctx);
  if (st.ok() && rt->draining()) st = absl::UnavailableError("server is draining");
  Req req;
  if (st.ok()) st = parse_request(*in, &req);
  if (st.ok()) {
    absl::StatusOr<Resp> r = handler(req);
    st = r.ok() ? serialize_response(*r, out) : r.status();
  }
  grpc::Status gs = to_grpc_status(st);
  rt->metrics()->record_request(rpc, gs.error_code(), seconds_since(t0));
  reactor->Finish(gs);
  return reactor;
}

absl::Status need_scheduler(JobsRuntime* rt) {
  if (!rt->cfg().jobs.enabled)
    return absl::FailedPreconditionError("training jobs are disabled (jobs.enabled: false)");
  if (!rt->scheduler()) return absl::UnavailableError("model is loading: not ready yet");
  return absl::OkStatus();
}

absl::Status check_id(const std::string& id, const char* field = "id") {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  if (id.size() > 128) return absl::InvalidArgumentError(absl::StrCat(field, ": longer than 128 bytes"));
  return absl::OkStatus();
}

v1::Artifact to_proto(const jobs::ArtifactInfo& a, bool active, int64_t device_bytes) {
  v1::Artifact p;
  p.set_name(a.name);
  p.set_kind(a.kind);
  p.set_version(a.version);
  p.set_active(active);
  p.set_bytes(a.bytes);
  p.set_device_bytes(device_bytes);
  p.set_job_id(a.job_id);
  p.set_created_unix(a.created_unix);
  p.set_backbone(a.backbone);
  p.set_report_json(a.report_json);
  return p;
}

}  // namespace

v1::Job to_proto(const jobs::JobRecord& j, bool with_spec) {
  v1::Job p;
  p.set_id(j.id);
  p.set_kind(j.kind);
  p.set_state(static_cast<v1::JobState>(static_cast<int>(j.state)));
  p.set_reason(j.reason);
  p.set_priority(j.priority);
  p.set_idempotency_key(j.idempotency_key);
  p.set_created_unix(j.created_unix);
  p.set_started_unix(j.started_unix);
  p.set_finished_unix(j.finished_unix);
  p.set_attempts(j.attempts);
  p.set_artifact(j.artifact);
  p.set_report_json(j.report_json);
  if (with_spec) p.set_spec_json(j.spec_json);
  if (!j.progress_json.empty()) {
    json pj = json::parse(j.progress_json, nullptr, false);
    if (pj.is_object()) {
      v1::JobProgress* pr = p.mutable_progress();
      pr->set_stage(pj.value("stage", ""));
      pr->set_epoch(pj.value("epoch", 0));
      pr->set_step(pj.value("step", int64_t{0}));
      pr->set_steps_total(pj.value("steps_total", int64_t{0}));
      pr->set_loss(pj.value("loss", 0.0));
      pr->set_examples_per_s(pj.value("examples_per_s", 0.0));
      pr->set_eta_s(pj.value("eta_s", 0.0));
    }
  }
  return p;
}

std::string prototype_spec_json(const v1::PrototypeJobSpec& s) {
  json j = json::object();
  if (s.data_case() == v1::PrototypeJobSpec::kTrainPath) j["train_path"] = s.train_path();
  if (s.data_case() == v1::PrototypeJobSpec::kInlineRows) {
    json rows = json::array();
    for (const v1::TrainingRow& r : s.inline_rows().rows()) {
      json row = {{"text", r.text()}, {"label", r.label()}};
      if (!r.id().empty()) row["id"] = r.id();
      rows.push_back(std::move(row));
    }
    j["inline_rows"] = std::move(rows);
  }
  if (!s.test_path().empty()) j["test_path"] = s.test_path();
  if (s.has_holdout_fraction()) j["holdout_fraction"] = s.holdout_fraction();
  if (s.has_label_min()) j["label_min"] = s.label_min();
  if (s.has_label_max()) j["label_max"] = s.label_max();
  json cfg = json::object();
  for (const auto& [k, v] : s.config()) cfg[k] = v;
  j["config"] = std::move(cfg);
  j["activate"] = s.activate();
  // Non-finite labels were refused by SubmitJob (JSON would turn them into null).
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string kv_repair_spec_json(const v1::KvRepairJobSpec& s) {
  json j = json::object();
  if (!s.calib_path().empty()) j["calib_path"] = s.calib_path();
  if (!s.test_path().empty()) j["test_path"] = s.test_path();
  if (s.has_calib_windows()) j["calib_windows"] = s.calib_windows();
  if (s.has_eval_windows()) j["eval_windows"] = s.eval_windows();
  json cfg = json::object();
  for (const auto& [k, v] : s.config()) cfg[k] = v;
  j["config"] = std::move(cfg);
  j["activate"] = s.activate();
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string kvsplice_spec_json(const v1::KvSpliceJobSpec& s) {
  json j = json::object();
  if (!s.calib_path().empty()) j["calib_path"] = s.calib_path();
  if (!s.test_path().empty()) j["test_path"] = s.test_path();
  if (s.has_calib_windows()) j["calib_windows"] = s.calib_windows();
  if (s.has_eval_windows()) j["eval_windows"] = s.eval_windows();
  if (s.has_fisher_windows()) j["fisher_windows"] = s.fisher_windows();
  json cfg = json::object();
  for (const auto& [k, v] : s.config()) cfg[k] = v;
  j["config"] = std::move(cfg);
  j["activate"] = s.activate();
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---------------------------------------------------------------------------------------------
// JobsRuntime

absl::StatusOr<std::unique_ptr<JobsRuntime>> JobsRuntime::create(const ServerConfig& cfg, Metrics* metrics,
                                                                 const Authenticator* auth) {
  std::unique_ptr<JobsRuntime> rt(new JobsRuntime(cfg, metrics, auth));
  if (cfg.jobs.enabled) {
    absl::StatusOr<std::unique_ptr<jobs::StateDirLock>> lock =
        jobs::StateDirLock::acquire(cfg.jobs.state_dir);
    if (!lock.ok()) return lock.status();
    rt->lock_ = *std::move(lock);
    FROST_ASSIGN_OR_RETURN(rt->store_, jobs::ArtifactStore::open(cfg.jobs.state_dir + "/artifacts"));
  }
  metrics->set_jobs_source([p = rt.get()] { return p->stats(); });
  return rt;
}

JobsRuntime::~JobsRuntime() {
  shutdown();
  metrics_->set_jobs_source(nullptr);
}

std::shared_ptr<const LoadedModel> JobsRuntime::model() const {
  absl::MutexLock l(&mu_);
  return model_;
}

absl::Status JobsRuntime::start(std::shared_ptr<const LoadedModel> model) {
  {
    absl::MutexLock l(&mu_);
    model_ = model;
  }
  bool kv_repair_artifact = false, kv_splice_artifact = false;
  if (cfg_.jobs.enabled) {
    for (const std::string kind : {"prototype", "kv_repair", "kvsplice"}) {
      absl::StatusOr<std::optional<std::string>> active = store_->active(kind);
      if (active.ok() && active->has_value()) {
        // activate() logs the success; it also rewrites ACTIVE with the same name (harmless).
        if (absl::Status st = activate(**active).status(); !st.ok()) {
          const char* what = kind == "prototype"   ? "Predict"
                             : kind == "kv_repair" ? "KV repair"
                                                   : "kv.codec kvsplice";
          FROST_LOG_ERROR(
              "frostd: the active %s artifact %s cannot be served (%s is off until one is activated): %s",
              kind.c_str(), (*active)->c_str(), what, st.ToString().c_str());
        } else if (kind == "kv_repair") {
          kv_repair_artifact = true;
        } else if (kind == "kvsplice") {
          kv_splice_artifact = true;
        }
      } else if (!active.ok()) {
        FROST_LOG_ERROR("frostd: %s", active.status().ToString().c_str());
      }
    }
  }
  if (!kv_repair_artifact && !cfg_.engine.kv_repair.empty()) {
    absl::StatusOr<std::shared_ptr<const RepairSlot::Active>> r = load_served_repair(
        cfg_.engine.kv_repair, repair_dims(model->config), "file:" + cfg_.engine.kv_repair, model->name);
    if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("engine.kv_repair: ", r.status().message()));
    kv_repair_.set(*r);
    FROST_LOG_INFO("frostd: KV repair %s for the %s codec", (*r)->name.c_str(), kv_codec_name((*r)->codec));
  }
  if (!kv_splice_artifact && !cfg_.engine.kv_splice.empty()) {
    absl::StatusOr<std::shared_ptr<const KvSpliceSlot::Active>> r = load_served_kvsplice(
        cfg_.engine.kv_splice, kvsplice_dims(model->config), "file:" + cfg_.engine.kv_splice, model->name);
    if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat("engine.kv_splice: ", r.status().message()));
    kv_splice_.set(*r);
    FROST_LOG_INFO("frostd: KVSplice %s (rank %s) for kv.codec kvsplice", (*r)->name.c_str(),
                   (*r)->set->ranks().label().c_str());
  }
  if (cfg_.engine.kv_codec == KvCodecKind::kKvSplice && !kv_splice_.get()) {
    FROST_LOG_WARN(
        "frostd: engine.kv_codec is kvsplice but no KVSplice is active: requests without kv.codec fail "
        "FAILED_PRECONDITION until a kvsplice artifact is activated (or engine.kv_splice is set)");
  }
  if (!cfg_.jobs.enabled) return absl::OkStatus();

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
  FROST_ASSIGN_OR_RETURN(std::unique_ptr<jobs::Scheduler> s, jobs::Scheduler::create(so, std::move(kinds)));
  s->set_activator([this](const std::string& name) { return activate(name).status(); });
  s->start();
  scheduler_ = std::move(s);
  return absl::OkStatus();
}

void JobsRuntime::shutdown() {
  if (scheduler_) scheduler_->shutdown();
}

absl::StatusOr<jobs::ArtifactInfo> JobsRuntime::activate(const std::string& name) {
  if (!store_) return absl::FailedPreconditionError("artifacts are disabled (jobs.enabled: false)");
  std::shared_ptr<const LoadedModel> m = model();
  if (!m) return absl::UnavailableError("model is loading: not ready yet");
  FROST_ASSIGN_OR_RETURN(jobs::ArtifactInfo a, store_->get(name));
  absl::MutexLock l(&activate_mu_);
  if (a.kind == "kv_repair") {
    absl::StatusOr<std::shared_ptr<const RepairSlot::Active>> r =
        jobs::load_kv_repair_artifact(a.dir, repair_dims(m->config), a.name, m->name);
    if (!r.ok()) {
      ++kv_repair_swap_failures_;
      return absl::FailedPreconditionError(
          absl::StrCat("artifact '", a.name, "' cannot be activated: ", r.status().message()));
    }
    FROST_RETURN_IF_ERROR(store_->set_active(a.kind, a.name));  // persisted before it serves
    kv_repair_.set(*r);
    ++kv_repair_swaps_;
    FROST_LOG_INFO("frostd: activated %s (KV repair for the %s codec)", a.name.c_str(),
                   kv_codec_name((*r)->codec));
    return a;
  }
  if (a.kind == "kvsplice") {
    absl::StatusOr<std::shared_ptr<const KvSpliceSlot::Active>> r =
        jobs::load_kvsplice_artifact(a.dir, kvsplice_dims(m->config), a.name, m->name);
    if (!r.ok()) {
      ++kv_splice_swap_failures_;
      return absl::FailedPreconditionError(
          absl::StrCat("artifact '", a.name, "' cannot be activated: ", r.status().message()));
    }
    FROST_RETURN_IF_ERROR(store_->set_active(a.kind, a.name));  // persisted before it serves
    kv_splice_.set(*r);
    ++kv_splice_swaps_;
    FROST_LOG_INFO("frostd: activated %s (KVSplice rank %s for kv.codec kvsplice)", a.name.c_str(),
                   (*r)->set->ranks().label().c_str());
    return a;
  }
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<const jobs::ServedPrototype> loaded, prototypes_.load(a, m));
  FROST_RETURN_IF_ERROR(store_->set_active(a.kind, a.name));  // persisted before it serves
  prototypes_.install(std::move(loaded));
  FROST_LOG_INFO("frostd: activated %s", a.name.c_str());
  return a;
}

JobsStats JobsRuntime::stats() const {
  JobsStats s;
  if (scheduler_) {
    jobs::Scheduler::Counts c = scheduler_->counts();
    for (jobs::JobState st :
         {jobs::JobState::kQueued, jobs::JobState::kRunning, jobs::JobState::kSucceeded,
          jobs::JobState::kFailed, jobs::JobState::kCancelled, jobs::JobState::kInterrupted}) {
      std::string name = jobs::job_state_name(st);
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      auto it = c.by_state.find(st);
      s.jobs_by_state[name] = it == c.by_state.end() ? 0 : it->second;
    }
    for (const auto& [id, p] : scheduler_->running_progress()) {
      s.job_running = true;
      json pj = json::parse(p, nullptr, false);
      if (pj.is_object()) {
        s.job_loss = pj.value("loss", 0.0);
        s.job_examples_per_s = pj.value("examples_per_s", 0.0);
      }
      break;
    }
  }
  s.store_bytes = tensors_.bytes_by_device();
  s.artifact_swaps = prototypes_.swaps() + kv_repair_swaps_.load() + kv_splice_swaps_.load();
  s.artifact_swap_failures =
      prototypes_.swap_failures() + kv_repair_swap_failures_.load() + kv_splice_swap_failures_.load();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Prediction

grpc::ServerUnaryReactor* PredictionService::Predict(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::PredictRequest, v1::PredictResponse>(
      rt_, ctx, in, out, "Prediction", "Predict",
      [&](const v1::PredictRequest& req) -> absl::StatusOr<v1::PredictResponse> {
        if (!rt_->model()) return absl::UnavailableError("model is loading: not ready yet");
        const LimitsSection& lim = rt_->cfg().limits;
        if (req.texts().empty()) return absl::InvalidArgumentError("texts: at least one text is required");
        if (req.texts_size() > lim.max_predict_texts)
          return absl::InvalidArgumentError(
              absl::StrCat("texts: ", req.texts_size(),
                           " texts is more than limits.max_predict_texts=", lim.max_predict_texts));
        for (int i = 0; i < req.texts_size(); ++i) {
          const std::string& t = req.texts(i);
          if (t.find_first_not_of(" \t\r\n") == std::string::npos)
            return absl::InvalidArgumentError(absl::StrCat("texts[", i, "]: empty or whitespace only"));
          if (static_cast<int64_t>(t.size()) > lim.max_prompt_bytes)
            return absl::InvalidArgumentError(
                absl::StrCat("texts[", i, "]: ", t.size(),
                             " bytes is more than limits.max_prompt_bytes=", lim.max_prompt_bytes));
        }
        // The version this request is served by, held until it returns.
        std::shared_ptr<const jobs::ServedPrototype> served = rt_->prototypes().current();
        if (!served)
          return absl::FailedPreconditionError(
              "no prototype artifact is active: train one (Training.SubmitJob) and activate it "
              "(Admin.ActivateArtifact)");
        const proto::PrototypeArtifact& art = served->predictor->artifact();
        const int K = art.cfg.K;
        int top_k = req.has_top_k() ? req.top_k() : std::min(kDefaultTopK, K);
        if (top_k < 0 || top_k > K)
          return absl::InvalidArgumentError(absl::StrCat("top_k: ", top_k, " is outside [0, ", K, "]"));
        std::vector<std::string> texts(req.texts().begin(), req.texts().end());
        FROST_ASSIGN_OR_RETURN(std::vector<proto::Prediction> ps, served->predictor->predict(texts, top_k));
        v1::PredictResponse resp;
        resp.set_artifact(served->name);
        resp.set_label_min(art.bounds.a);
        resp.set_label_max(art.bounds.b);
        int64_t n_ood = 0;
        for (const proto::Prediction& p : ps) {
          v1::PredictionResult* r = resp.add_results();
          r->set_value(p.value);
          r->set_value_unrefined(p.value_unrefined);
          r->set_knn_value(p.knn_value);
          r->set_population_consistency(p.population_consistency);
          r->set_agreement_consistency(p.agreement_consistency);
          r->set_out_of_distribution(p.out_of_distribution);
          r->set_alpha(p.alpha);
          r->set_beta(p.beta);
          r->set_restr_fallback(p.restr_fallback);
          r->set_label_reliance(p.label_reliance);
          n_ood += p.out_of_distribution;
          for (const proto::Attribution& a : p.top) {
            v1::PrototypeRef* pr = r->add_prototypes();
            pr->set_dataset_index(a.index);
            pr->set_id(a.id);
            pr->set_text(a.text);
            pr->set_label(a.label);
            pr->set_weight(a.weight);
            pr->set_slot(static_cast<int32_t>(a.slot));
          }
        }
        rt_->metrics()->record_predictions(static_cast<int64_t>(ps.size()), n_ood);
        return resp;
      });
}

// ---------------------------------------------------------------------------------------------
// Training

grpc::ServerUnaryReactor* TrainingService::SubmitJob(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::SubmitJobRequest, v1::Job>(
      rt_, ctx, in, out, "Training", "SubmitJob",
      [&](const v1::SubmitJobRequest& req) -> absl::StatusOr<v1::Job> {
        FROST_RETURN_IF_ERROR(need_scheduler(rt_));
        std::string kind, spec;
        switch (req.spec_case()) {
          case v1::SubmitJobRequest::kPrototype:
            kind = "prototype";
            // JSON has no NaN/Inf (they would become null): refuse them here, numbered like the
            // row validator's messages.
            for (int i = 0; i < req.prototype().inline_rows().rows_size(); ++i) {
              const double y = req.prototype().inline_rows().rows(i).label();
              if (!std::isfinite(y))
                return absl::InvalidArgumentError(
                    absl::StrCat("inline_rows:", i + 1, ": \"label\" ", y, " is not a finite number"));
            }
            spec = prototype_spec_json(req.prototype());
            break;
          case v1::SubmitJobRequest::kKvRepair:
            kind = "kv_repair";
            spec = kv_repair_spec_json(req.kv_repair());
            break;
          case v1::SubmitJobRequest::kKvsplice:
            kind = "kvsplice";
            spec = kvsplice_spec_json(req.kvsplice());
            break;
          default:
            return absl::InvalidArgumentError(
                "spec: no job spec given (set `prototype`, `kv_repair` or `kvsplice`)");
        }
        FROST_ASSIGN_OR_RETURN(jobs::JobRecord j,
                               rt_->scheduler()->submit(kind, spec, req.priority(), req.idempotency_key()));
        return to_proto(j);
      });
}

grpc::ServerUnaryReactor* TrainingService::GetJob(grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::GetJobRequest, v1::Job>(
      rt_, ctx, in, out, "Training", "GetJob", [&](const v1::GetJobRequest& req) -> absl::StatusOr<v1::Job> {
        FROST_RETURN_IF_ERROR(need_scheduler(rt_));
        FROST_RETURN_IF_ERROR(check_id(req.id()));
        FROST_ASSIGN_OR_RETURN(jobs::JobRecord j, rt_->scheduler()->get(req.id()));
        return to_proto(j);
      });
}

grpc::ServerUnaryReactor* TrainingService::ListJobs(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::ListJobsRequest, v1::ListJobsResponse>(
      rt_, ctx, in, out, "Training", "ListJobs",
      [&](const v1::ListJobsRequest& req) -> absl::StatusOr<v1::ListJobsResponse> {
        FROST_RETURN_IF_ERROR(need_scheduler(rt_));
        jobs::ListQuery q;
        for (int i = 0; i < req.states_size(); ++i) {
          const int s = req.states(i);
          if (s < 1 || s > 6)
            return absl::InvalidArgumentError(absl::StrCat("states[", i, "]: ", s, " is not a job state"));
          q.states.push_back(static_cast<jobs::JobState>(s));
        }
        q.kind = req.kind();
        if (req.page_size() < 0 || req.page_size() > kMaxPageSize)
          return absl::InvalidArgumentError(
              absl::StrCat("page_size: ", req.page_size(), " is outside [0, ", kMaxPageSize, "]"));
        q.limit = req.page_size() == 0 ? kDefaultPageSize : req.page_size();
        if (!req.page_token().empty() &&
            (!absl::SimpleAtoi(req.page_token(), &q.before_seq) || q.before_seq <= 0))
          return absl::InvalidArgumentError(absl::StrCat("page_token: \"", req.page_token().substr(0, 40),
                                                         "\" is not a token from ListJobs"));
        ++q.limit;  // one more row tells whether there is a next page
        FROST_ASSIGN_OR_RETURN(std::vector<jobs::JobRecord> js, rt_->scheduler()->list(q));
        v1::ListJobsResponse resp;
        const bool more = static_cast<int32_t>(js.size()) == q.limit;
        if (more) js.pop_back();
        for (const jobs::JobRecord& j : js) *resp.add_jobs() = to_proto(j);
        if (more && !js.empty()) resp.set_next_page_token(absl::StrCat(js.back().seq));
        return resp;
      });
}

grpc::ServerUnaryReactor* TrainingService::CancelJob(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::CancelJobRequest, v1::Job>(
      rt_, ctx, in, out, "Training", "CancelJob",
      [&](const v1::CancelJobRequest& req) -> absl::StatusOr<v1::Job> {
        FROST_RETURN_IF_ERROR(need_scheduler(rt_));
        FROST_RETURN_IF_ERROR(check_id(req.id()));
        FROST_ASSIGN_OR_RETURN(jobs::JobRecord j, rt_->scheduler()->cancel(req.id()));
        return to_proto(j);
      });
}

class TrainingService::WatchCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchCall(JobsRuntime* rt, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in) : rt_(rt) {
    t0_ = RealClock::get().now_ns();
    absl::Status st = rt->auth()->check("/frost.v1.Training/WatchJob", ctx);
    if (st.ok() && rt->draining()) st = absl::UnavailableError("server is draining");
    if (st.ok()) st = need_scheduler(rt);
    v1::WatchJobRequest req;
    if (st.ok()) st = parse_request(*in, &req);
    if (st.ok()) st = check_id(req.id());
    if (!st.ok()) {
      finish(st);
      return;
    }
    sub_ = rt->scheduler()->subscribe(req.id(), [this](const jobs::JobRecord& j) { on_event(j); });
    absl::StatusOr<jobs::JobRecord> j = rt->scheduler()->get(req.id());
    if (!j.ok()) {
      finish(j.status());
      return;
    }
    on_event(*j);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock l(&mu_);
    writing_ = false;
    if (!ok) {
      finish_locked(absl::CancelledError("client went away"));
      return;
    }
    if (last_terminal_ && !pending_) {
      finish_locked(absl::OkStatus());
      return;
    }
    write_pending_locked();
  }
  void OnCancel() override {
    absl::MutexLock l(&mu_);
    finish_locked(absl::CancelledError("WatchJob cancelled"));
  }
  void OnDone() override {
    if (sub_) rt_->scheduler()->unsubscribe(sub_);  // after this no event can reach us
    delete this;
  }

 private:
  void on_event(const jobs::JobRecord& j) {
    absl::MutexLock l(&mu_);
    if (finished_ || last_terminal_) return;
    v1::JobEvent ev;
    *ev.mutable_job() = to_proto(j, /*with_spec=*/false);  // spec: large (inline rows); GetJob has it
    pending_ = std::make_unique<v1::JobEvent>(std::move(ev));
    pending_terminal_ = jobs::is_terminal(j.state);
    if (pending_terminal_) last_terminal_ = true;
    if (!writing_) write_pending_locked();
  }
  void write_pending_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!pending_ || finished_) return;
    absl::Status st = serialize_response(*pending_, &buf_);
    pending_.reset();
    if (!st.ok()) {
      finish_locked(st);
      return;
    }
    writing_ = true;
    StartWrite(&buf_);
  }
  void finish(const absl::Status& st) {
    absl::MutexLock l(&mu_);
    finish_locked(st);
  }
  void finish_locked(const absl::Status& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    grpc::Status gs = to_grpc_status(st);
    rt_->metrics()->record_request("WatchJob", gs.error_code(), seconds_since(t0_));
    Finish(gs);
  }

  JobsRuntime* rt_;
  int64_t t0_ = 0;
  uint64_t sub_ = 0;
  absl::Mutex mu_;
  grpc::ByteBuffer buf_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<v1::JobEvent> pending_ ABSL_GUARDED_BY(mu_);
  bool pending_terminal_ ABSL_GUARDED_BY(mu_) = false;
  bool last_terminal_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* TrainingService::WatchJob(grpc::CallbackServerContext* ctx,
                                                                      const grpc::ByteBuffer* in) {
  return new WatchCall(rt_, ctx, in);
}

// ---------------------------------------------------------------------------------------------
// Admin

grpc::ServerUnaryReactor* AdminService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::ServerInfoRequest, v1::ServerInfo>(
      rt_, ctx, in, out, "Admin", "GetServerInfo",
      [&](const v1::ServerInfoRequest&) -> absl::StatusOr<v1::ServerInfo> {
        v1::ServerInfo info;
        info.set_version(FROST_VERSION);
        std::shared_ptr<const LoadedModel> m = rt_->model();
        info.set_model(m ? m->name : "");
        info.set_device(rt_->tensors().device());
        for (const auto& [d, b] : rt_->tensors().bytes_by_device()) (*info.mutable_store_bytes())[d] = b;
        if (auto cur = rt_->prototypes().current()) info.add_active_artifacts(cur->name);
        if (auto kr = rt_->kv_repair().get()) info.add_active_artifacts(kr->name);
        if (auto ks = rt_->kv_splice().get()) info.add_active_artifacts(ks->name);
        if (rt_->scheduler()) {
          jobs::Scheduler::Counts c = rt_->scheduler()->counts();
          info.set_jobs_queued(static_cast<int32_t>(c.queued));
          info.set_jobs_running(static_cast<int32_t>(c.running));
        }
        info.set_state_dir(rt_->cfg().jobs.enabled ? rt_->cfg().jobs.state_dir : "");
        return info;
      });
}

grpc::ServerUnaryReactor* AdminService::ListArtifacts(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::ListArtifactsRequest, v1::ListArtifactsResponse>(
      rt_, ctx, in, out, "Admin", "ListArtifacts",
      [&](const v1::ListArtifactsRequest& req) -> absl::StatusOr<v1::ListArtifactsResponse> {
        if (!rt_->store())
          return absl::FailedPreconditionError("artifacts are disabled (jobs.enabled: false)");
        FROST_ASSIGN_OR_RETURN(std::vector<jobs::ArtifactInfo> all, rt_->store()->list(req.kind()));
        std::shared_ptr<const jobs::ServedPrototype> cur = rt_->prototypes().current();
        std::shared_ptr<const RepairSlot::Active> kr = rt_->kv_repair().get();
        std::shared_ptr<const KvSpliceSlot::Active> ks = rt_->kv_splice().get();
        v1::ListArtifactsResponse resp;
        for (const jobs::ArtifactInfo& a : all) {
          const bool active =
              (cur && cur->name == a.name) || (kr && kr->name == a.name) || (ks && ks->name == a.name);
          *resp.add_artifacts() = to_proto(a, active, rt_->tensors().bytes_of(a.name));
        }
        return resp;
      });
}

grpc::ServerUnaryReactor* AdminService::ActivateArtifact(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::ActivateArtifactRequest, v1::Artifact>(
      rt_, ctx, in, out, "Admin", "ActivateArtifact",
      [&](const v1::ActivateArtifactRequest& req) -> absl::StatusOr<v1::Artifact> {
        FROST_RETURN_IF_ERROR(jobs::parse_artifact_name(req.name()).status());
        FROST_ASSIGN_OR_RETURN(jobs::ArtifactInfo a, rt_->activate(req.name()));
        return to_proto(a, true, rt_->tensors().bytes_of(a.name));
      });
}

grpc::ServerUnaryReactor* AdminService::DeleteArtifact(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return unary<v1::DeleteArtifactRequest, v1::DeleteArtifactResponse>(
      rt_, ctx, in, out, "Admin", "DeleteArtifact",
      [&](const v1::DeleteArtifactRequest& req) -> absl::StatusOr<v1::DeleteArtifactResponse> {
        if (!rt_->store())
          return absl::FailedPreconditionError("artifacts are disabled (jobs.enabled: false)");
        FROST_ASSIGN_OR_RETURN(auto kv, jobs::parse_artifact_name(req.name()));
        FROST_ASSIGN_OR_RETURN(std::optional<std::string> active, rt_->store()->active(kv.first));
        std::shared_ptr<const jobs::ServedPrototype> cur = rt_->prototypes().current();
        if ((active && *active == req.name()) || (cur && cur->name == req.name()))
          return absl::FailedPreconditionError(
              absl::StrCat("artifact '", req.name(), "' is active; activate another version first"));
        FROST_RETURN_IF_ERROR(rt_->store()->remove(req.name()));
        return v1::DeleteArtifactResponse();
      });
}

}  // namespace frost::server
