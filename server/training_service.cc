#include "server/training_service.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "core/common/status_macros.h"
#include "server/service_util.h"

namespace frost::server {
namespace {

constexpr int kTrainingThreads = 2, kTrainingMaxQueued = 64;
constexpr char kService[] = "frost.v1.Training";
constexpr int32_t kDefaultPageSize = 50, kMaxPageSize = 1000;

// The caps on a request's repeated fields that no config setting covers (inline rows: jobs.max_inline_rows).
constexpr int kMaxConfigEntries = 64;  // entries of a job spec's config map
constexpr int kMaxListStates = 6;      // ListJobsRequest.states: one per job state

absl::Status check_config_size(const char* field, int n) {
  if (n <= kMaxConfigEntries) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", n, " entries is more than the cap of ", kMaxConfigEntries));
}

// The caps on the repeated fields of a SubmitJobRequest, before anything copies them.
absl::Status check_spec_caps(const v1::SubmitJobRequest& req, int64_t max_inline_rows) {
  switch (req.spec_case()) {
    case v1::SubmitJobRequest::kPrototype:
      if (const int n = req.prototype().inline_rows().rows_size(); n > max_inline_rows)
        return absl::InvalidArgumentError(
            absl::StrCat("prototype.inline_rows.rows: ", n,
                         " rows is more than jobs.max_inline_rows=", max_inline_rows, "; use train_path"));
      return check_config_size("prototype.config", req.prototype().config_size());
    case v1::SubmitJobRequest::kKvRepair:
      return check_config_size("kv_repair.config", req.kv_repair().config_size());
    case v1::SubmitJobRequest::kKvsplice:
      return check_config_size("kvsplice.config", req.kvsplice().config_size());
    default:
      return absl::OkStatus();
  }
}

}  // namespace

jobs::PrototypeJobSpec from_proto(const v1::PrototypeJobSpec& s) {
  jobs::PrototypeJobSpec j;
  if (s.data_case() == v1::PrototypeJobSpec::kTrainPath) j.train_path = s.train_path();
  if (s.data_case() == v1::PrototypeJobSpec::kInlineRows) {
    std::vector<jobs::TrainingRow> rows;
    rows.reserve(static_cast<size_t>(s.inline_rows().rows_size()));
    for (const v1::TrainingRow& r : s.inline_rows().rows()) rows.push_back({r.text(), r.label(), r.id()});
    j.inline_rows = std::move(rows);
  }
  if (!s.test_path().empty()) j.test_path = s.test_path();
  if (s.has_holdout_fraction()) j.holdout_fraction = s.holdout_fraction();
  if (s.has_label_min()) j.label_min = s.label_min();
  if (s.has_label_max()) j.label_max = s.label_max();
  for (const auto& [k, v] : s.config()) j.config.emplace_back(k, v);
  std::sort(j.config.begin(), j.config.end());  // protobuf maps have no order: make it deterministic
  j.activate = s.activate();
  return j;
}

template <class P, class S>
S kv_from_proto(const P& p) {
  S s;
  if (!p.calib_path().empty()) s.calib_path = p.calib_path();
  if (!p.test_path().empty()) s.test_path = p.test_path();
  if (p.has_calib_windows()) s.calib_windows = p.calib_windows();
  if (p.has_eval_windows()) s.eval_windows = p.eval_windows();
  for (const auto& [k, v] : p.config()) s.config.emplace_back(k, v);
  std::sort(s.config.begin(), s.config.end());
  s.activate = p.activate();
  return s;
}

jobs::KvRepairJobSpec from_proto(const v1::KvRepairJobSpec& p) {
  return kv_from_proto<v1::KvRepairJobSpec, jobs::KvRepairJobSpec>(p);
}

jobs::KvSpliceJobSpec from_proto(const v1::KvSpliceJobSpec& p) {
  jobs::KvSpliceJobSpec s = kv_from_proto<v1::KvSpliceJobSpec, jobs::KvSpliceJobSpec>(p);
  if (p.has_fisher_windows()) s.fisher_windows = p.fisher_windows();
  return s;
}

TrainingService::TrainingService(Runtime* rt)
    : rt_(rt), exec_("frost-training", kTrainingThreads, kTrainingMaxQueued) {}

grpc::ServerUnaryReactor* TrainingService::SubmitJob(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  // A validated SubmitJob: the typed spec and the queueing fields.
  struct Submit {
    jobs::JobSpec spec;
    int32_t priority = 0;
    std::string idempotency_key;
  };
  // On the callback thread: the caps and the typed spec (no file is opened yet).
  auto validate = [rt = rt_](v1::SubmitJobRequest&& req) -> absl::StatusOr<Submit> {
    FROST_RETURN_IF_ERROR(need_scheduler(rt));
    FROST_RETURN_IF_ERROR(check_spec_caps(req, rt->cfg().jobs.max_inline_rows));
    Submit sub;
    switch (req.spec_case()) {
      case v1::SubmitJobRequest::kPrototype:
        // The journal keeps specs as JSON, which has no NaN/Inf (they would become null): refuse them
        // here, numbered like the row validator's messages.
        for (int i = 0; i < req.prototype().inline_rows().rows_size(); ++i) {
          const double y = req.prototype().inline_rows().rows(i).label();
          if (!std::isfinite(y))
            return absl::InvalidArgumentError(
                absl::StrCat("inline_rows:", i + 1, ": \"label\" ", y, " is not a finite number"));
        }
        sub.spec = from_proto(req.prototype());
        break;
      case v1::SubmitJobRequest::kKvRepair:
        sub.spec = from_proto(req.kv_repair());
        break;
      case v1::SubmitJobRequest::kKvsplice:
        sub.spec = from_proto(req.kvsplice());
        break;
      default:
        return absl::InvalidArgumentError(
            "spec: no job spec given (set `prototype`, `kv_repair` or `kvsplice`)");
    }
    sub.priority = req.priority();
    sub.idempotency_key = req.idempotency_key();
    return sub;
  };
  // On the executor: JobKind::prepare reads (and tokenizes) the data files, then the journal commit.
  auto submit = [rt = rt_](Submit& sub) -> absl::StatusOr<v1::Job> {
    FROST_RETURN_IF_ERROR(need_scheduler(rt));  // again: the scheduler may have stopped while queued
    FROST_ASSIGN_OR_RETURN(jobs::JobRecord j,
                           rt->scheduler()->submit(sub.spec, sub.priority, sub.idempotency_key));
    return to_proto(j);
  };
  return serve_unary<v1::SubmitJobRequest, v1::Job>(unary_server(rt_, kService, &exec_), ctx, in, out,
                                                    {"SubmitJob", Mode::kExecutor}, validate, submit);
}

grpc::ServerUnaryReactor* TrainingService::GetJob(grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<v1::GetJobRequest, v1::Job>(
      unary_server(rt_, kService, &exec_), ctx, in, out, {"GetJob", Mode::kExecutor},
      [rt = rt_](const v1::GetJobRequest& req) -> absl::StatusOr<v1::Job> {
        FROST_RETURN_IF_ERROR(need_scheduler(rt));
        FROST_RETURN_IF_ERROR(check_id(req.id()));
        FROST_ASSIGN_OR_RETURN(jobs::JobRecord j, rt->scheduler()->get(req.id()));
        return to_proto(j);
      });
}

grpc::ServerUnaryReactor* TrainingService::ListJobs(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return serve_unary<v1::ListJobsRequest, v1::ListJobsResponse>(
      unary_server(rt_, kService, &exec_), ctx, in, out, {"ListJobs", Mode::kExecutor},
      [rt = rt_](const v1::ListJobsRequest& req) -> absl::StatusOr<v1::ListJobsResponse> {
        FROST_RETURN_IF_ERROR(need_scheduler(rt));
        jobs::ListQuery q;
        if (req.states_size() > kMaxListStates)
          return absl::InvalidArgumentError(absl::StrCat("states: ", req.states_size(),
                                                         " entries is more than the cap of ", kMaxListStates,
                                                         " (one per job state)"));
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
        FROST_ASSIGN_OR_RETURN(std::vector<jobs::JobRecord> js, rt->scheduler()->list(q));
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
  return serve_unary<v1::CancelJobRequest, v1::Job>(
      unary_server(rt_, kService, &exec_), ctx, in, out, {"CancelJob", Mode::kExecutor},
      [rt = rt_](const v1::CancelJobRequest& req) -> absl::StatusOr<v1::Job> {
        FROST_RETURN_IF_ERROR(need_scheduler(rt));
        FROST_RETURN_IF_ERROR(check_id(req.id()));
        FROST_ASSIGN_OR_RETURN(jobs::JobRecord j, rt->scheduler()->cancel(req.id()));
        return to_proto(j);
      });
}

class TrainingService::WatchCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchCall(Runtime* rt, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in) : rt_(rt) {
    t0_ = RealClock::get().now_ns();
    absl::Status st = admit(unary_server(rt, kService, nullptr), ctx, "WatchJob");
    v1::WatchJobRequest req;
    if (st.ok()) st = parse_request(*in, &req);
    if (st.ok()) st = need_scheduler(rt);
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

  Runtime* rt_;
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

}  // namespace frost::server
