#pragma once
// serve_unary: the one shape of every unary RPC of frostd (Generation, Prediction, Training, Admin, the Open
// Inference Protocol and grpc.health.v1) on the gRPC callback API.
//
//   callback thread   admit (auth, then the drain check) → parse → prepare (validation only)
//   Mode::kInline     handler on the callback thread: only for handlers that read in-memory state
//   Mode::kExecutor   handler on the service's Executor (server/executor.h): model, disk (journal, artifact
//                     store, data files) and tokenizer work; a full queue is RESOURCE_EXHAUSTED at once
//   either            serialize → record frost_requests_total / the latency histogram → Finish
//
// Why: a callback thread that blocks holds one of gRPC's few callback threads, and with them Health.Check and
// the start of every Generate stream on the server (docs/conventions.md, "Reactors never block"). The callback thread
// therefore only checks, decodes and queues; a worker finishes the call. The request, the prepared job and
// the handler are owned by the queued task; `out` and the reactor stay valid until Finish.
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/check.h"
#include "core/common/clock.h"
#include "server/auth.h"
#include "server/executor.h"
#include "server/metrics.h"
#include "server/proto_codec.h"
#include "server/status_convert.h"

namespace frost::server {

enum class Mode { kInline, kExecutor };

// One unary RPC: its name, where its handler runs, and whether a drain refuses it.
struct UnaryRpc {
  const char* name;  // "ActivateArtifact": the metric's rpc label and the last part of the auth method
  Mode mode = Mode::kInline;
  bool refuse_while_draining = true;  // false: answered while draining (liveness, model info)
};

// What every unary RPC of one service shares.
struct UnaryServer {
  const char* service = "";             // "frost.v1.Admin": the auth method is "/<service>/<rpc>"
  const Authenticator* auth = nullptr;  // nullptr: no auth, only the metadata size check below (Health)
  int64_t max_metadata_bytes = 0;       // checked when auth is nullptr (auth checks its own); 0 = unchecked
  std::function<bool()> draining;       // nullptr: never draining
  Metrics* metrics = nullptr;           // nullptr: not recorded (Health)
  Executor* executor = nullptr;         // where Mode::kExecutor handlers run
};

inline double seconds_since(int64_t t0_ns) {
  return static_cast<double>(RealClock::get().now_ns() - t0_ns) * 1e-9;
}

// Auth (or the metadata size), then the drain: OK when the call may proceed. The one copy of this check: the
// unary RPCs (serve_unary) and the streams (Generate, WatchJob) call it.
absl::Status admit(const UnaryServer& s, grpc::CallbackServerContext* ctx, const char* rpc,
                   bool refuse_while_draining = true);

// Records the outcome and finishes the call (any thread).
void finish_unary(Metrics* metrics, const char* rpc, grpc::ServerUnaryReactor* reactor, int64_t t0_ns,
                  const absl::Status& st);

// The general form: `prepare(Req&&) → StatusOr<Job>` on the callback thread (validation, nothing that
// blocks), then `handle(Job&) → StatusOr<Resp>` as `rpc.mode` says.
template <class Req, class Resp, class Prepare, class Handle>
grpc::ServerUnaryReactor* serve_unary(const UnaryServer& s, grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* in, grpc::ByteBuffer* out, UnaryRpc rpc,
                                      Prepare&& prepare, Handle&& handle) {
  using Job = typename std::invoke_result_t<Prepare, Req&&>::value_type;
  const int64_t t0 = RealClock::get().now_ns();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto respond = [metrics = s.metrics, name = rpc.name, reactor, t0, out](const absl::StatusOr<Resp>& r) {
    finish_unary(metrics, name, reactor, t0, r.ok() ? serialize_response(*r, out) : r.status());
  };
  absl::Status st = admit(s, ctx, rpc.name, rpc.refuse_while_draining);
  Req req;
  if (st.ok()) st = parse_request(*in, &req);
  if (!st.ok()) {
    respond(st);
    return reactor;
  }
  absl::StatusOr<Job> job = prepare(std::move(req));
  if (!job.ok()) {
    respond(job.status());
    return reactor;
  }
  if (rpc.mode == Mode::kInline) {
    respond(handle(*job));
    return reactor;
  }
  FROST_CHECK(s.executor != nullptr, "serve_unary: Mode::kExecutor without an executor");
  auto task = [respond, handle = std::forward<Handle>(handle),
               j = std::make_shared<Job>(*std::move(job))]() mutable { respond(handle(*j)); };
  if (absl::Status q = s.executor->submit(std::move(task)); !q.ok()) respond(q);
  return reactor;
}

// The common form: no separate preparation; `handle(const Req&) → StatusOr<Resp>` as `rpc.mode` says. In
// Mode::kExecutor the handler must own what it captures (it runs after the callback returned).
template <class Req, class Resp, class Handle>
grpc::ServerUnaryReactor* serve_unary(const UnaryServer& s, grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* in, grpc::ByteBuffer* out, UnaryRpc rpc,
                                      Handle&& handle) {
  return serve_unary<Req, Resp>(
      s, ctx, in, out, rpc, [](Req&& r) { return absl::StatusOr<Req>(std::move(r)); },
      [h = std::forward<Handle>(handle)](Req& r) mutable { return h(static_cast<const Req&>(r)); });
}

}  // namespace frost::server
