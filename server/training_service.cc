#include "server/training_service.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "absl/strings/numbers.h"
#include "core/common/config_fields.h"
#include "core/common/status_macros.h"
#include "server/proto_fields.h"
#include "server/service_util.h"
#include "server/stream_writer.h"

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

// The scalar fields are the spec tables' rows, read by their proto names through reflection
// (server/proto_fields.h); inline_rows (a message) and config (a map) are read by hand.
absl::StatusOr<jobs::PrototypeJobSpec> from_proto(const v1::PrototypeJobSpec& s) {
  jobs::PrototypeJobSpec j;
  FROST_RETURN_IF_ERROR(read_proto_fields(s, jobs::prototype_spec_table(), {}, "prototype.", &j));
  if (s.data_case() == v1::PrototypeJobSpec::kInlineRows) {
    std::vector<jobs::TrainingRow> rows;
    rows.reserve(static_cast<size_t>(s.inline_rows().rows_size()));
    for (const v1::TrainingRow& r : s.inline_rows().rows()) rows.push_back({r.text(), r.label(), r.id()});
    j.inline_rows = std::move(rows);
  }
  for (const auto& [k, v] : s.config()) j.config.emplace_back(k, v);
  std::sort(j.config.begin(), j.config.end());  // protobuf maps have no order: make it deterministic
  return j;
}

template <class P, class S>
absl::StatusOr<S> kv_from_proto(const P& p, const ConfigTable<S>& table, const std::string& prefix) {
  S s;
  FROST_RETURN_IF_ERROR(read_proto_fields(p, table, {}, prefix, &s));
  for (const auto& [k, v] : p.config()) s.config.emplace_back(k, v);
  std::sort(s.config.begin(), s.config.end());
  return s;
}

absl::StatusOr<jobs::KvRepairJobSpec> from_proto(const v1::KvRepairJobSpec& p) {
  return kv_from_proto(p, jobs::kv_repair_spec_table(), "kv_repair.");
}

absl::StatusOr<jobs::KvSpliceJobSpec> from_proto(const v1::KvSpliceJobSpec& p) {
  return kv_from_proto(p, jobs::kvsplice_spec_table(), "kvsplice.");
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
      case v1::SubmitJobRequest::kPrototype: {
        // The journal keeps specs as JSON, which has no NaN/Inf (they would become null): refuse them
        // here, numbered like the row validator's messages (the scalar fields' rows refuse them too).
        for (int i = 0; i < req.prototype().inline_rows().rows_size(); ++i) {
          const double y = req.prototype().inline_rows().rows(i).label();
          if (!std::isfinite(y))
            return absl::InvalidArgumentError(
                absl::StrCat("inline_rows:", i + 1, ": \"label\" ", y, " is not a finite number"));
        }
        FROST_ASSIGN_OR_RETURN(sub.spec, from_proto(req.prototype()));
        break;
      }
      case v1::SubmitJobRequest::kKvRepair: {
        FROST_ASSIGN_OR_RETURN(sub.spec, from_proto(req.kv_repair()));
        break;
      }
      case v1::SubmitJobRequest::kKvsplice: {
        FROST_ASSIGN_OR_RETURN(sub.spec, from_proto(req.kvsplice()));
        break;
      }
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

// One WatchJob stream (server/stream_writer.h: the newest state, coalesced; the terminal state ends it). On
// the callback thread only the checks and the subscription; the first read of the job (the journal) runs on
// the service's executor, like the unary calls: a full queue is RESOURCE_EXHAUSTED at once.
//
// Order: the subscription comes before the read, so no change is missed, and the read's result is written
// only when no event has arrived meanwhile. Either way the first message is the job's state at subscription
// or later: the scheduler commits a job's changes one after another and notifies each before committing the
// next (core/jobs/scheduler.h), so an event that arrives after the subscription is at least the state at
// subscription, and it supersedes the read (an event the read already saw is followed by the event of any
// newer state the read saw). Events carry increasing versions and the read version 0, so an older state is
// never written after a newer one.
class TrainingService::WatchCall final : public CoalescingStream<v1::JobEvent> {
 public:
  WatchCall(Runtime* rt, Executor* exec, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in)
      : CoalescingStream("client went away"), rt_(rt), t0_(RealClock::get().now_ns()) {
    absl::Status st = admit(unary_server(rt, kService, nullptr), ctx, "WatchJob");
    v1::WatchJobRequest req;
    if (st.ok()) st = parse_request(*in, &req);
    if (st.ok()) st = need_scheduler(rt);
    if (st.ok()) st = check_id(req.id());
    if (!st.ok()) {
      abort(st);
      return;
    }
    hold();  // until the read has run (before the subscription: an event may end the call at once)
    sub_ = rt->scheduler()->subscribe(req.id(), [this](const jobs::JobRecord& j) { on_event(j, ++events_); });
    absl::Status q = exec->submit([this, id = req.id()] {
      absl::StatusOr<jobs::JobRecord> j = rt_->scheduler()->get(id);
      if (j.ok()) {
        on_event(*j, /*version=*/0);
      } else {
        abort(j.status());
      }
      release();
    });
    if (!q.ok()) {
      abort(q);
      release();
    }
  }

  void OnCancel() override { abort(absl::CancelledError("WatchJob cancelled")); }
  void OnDone() override { release(); }

 private:
  void on_event(const jobs::JobRecord& j, uint64_t version) {
    v1::JobEvent ev;
    *ev.mutable_job() = to_proto(j, /*with_spec=*/false);  // spec: large (inline rows); GetJob has it
    post(std::move(ev), jobs::is_terminal(j.state), version);
  }
  void before_finish(const grpc::Status& st, bool /*failed*/) override {
    rt_->metrics()->record_request("WatchJob", st.error_code(), seconds_since(t0_));
  }
  // Deleted after OnDone and the read (CoalescingStream::release), so sub_ is set by now. An event in flight
  // finishes first (unsubscribe waits for it) and finds the call finished.
  ~WatchCall() override {
    if (sub_) rt_->scheduler()->unsubscribe(sub_);
  }

  Runtime* rt_;
  const int64_t t0_;
  uint64_t sub_ = 0;
  std::atomic<uint64_t> events_{0};  // events heard (the scheduler notifies one at a time)
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* TrainingService::WatchJob(grpc::CallbackServerContext* ctx,
                                                                      const grpc::ByteBuffer* in) {
  return new WatchCall(rt_, &exec_, ctx, in);
}

}  // namespace frost::server
