#pragma once
// What the Prediction, Training and Admin services share: the shape of a unary method (auth, drain check,
// parse, handle, serialize, record), request-field checks, and the conversions of the jobs and artifacts
// they return (the proto edge of core/jobs and core/serving).
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "core/jobs/journal.h"
#include "core/serving/artifact_store.h"
#include "frost/v1/admin.pb.h"
#include "frost/v1/training.pb.h"
#include "server/proto_codec.h"
#include "server/runtime.h"
#include "server/status_convert.h"

namespace frost::server {

inline double seconds_since(int64_t t0_ns) {
  return static_cast<double>(RealClock::get().now_ns() - t0_ns) * 1e-9;
}

// Auth and drain: OK when the call may proceed.
inline absl::Status admit(Runtime* rt, grpc::CallbackServerContext* ctx, const char* service, const char* rpc) {
  absl::Status st = rt->auth()->check(absl::StrCat("/frost.v1.", service, "/", rpc), ctx);
  if (st.ok() && rt->draining()) st = absl::UnavailableError("server is draining");
  return st;
}

// Auth, parse, handle, serialize, record — on the callback thread: for handlers that only touch in-memory
// state, the journal or the artifact store, never the model.
template <class Req, class Resp, class F>
grpc::ServerUnaryReactor* unary(Runtime* rt, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                grpc::ByteBuffer* out, const char* service, const char* rpc, F&& handler) {
  const int64_t t0 = RealClock::get().now_ns();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::Status st = admit(rt, ctx, service, rpc);
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

// Training needs a running scheduler: FAILED_PRECONDITION when jobs are disabled, UNAVAILABLE while loading.
absl::Status need_scheduler(Runtime* rt);
// A job id field: INVALID_ARGUMENT naming `field` when empty or longer than 128 bytes.
absl::Status check_id(const std::string& id, const char* field = "id");

// JobRecord → frost.v1.Job (progress JSON → JobProgress); without spec_json when !with_spec (WatchJob
// events: the spec can hold megabytes of inline rows and is sent per progress step).
v1::Job to_proto(const jobs::JobRecord& j, bool with_spec = true);
// ArtifactInfo → frost.v1.Artifact.
v1::Artifact to_proto(const serving::ArtifactInfo& a, bool active, int64_t device_bytes);

}  // namespace frost::server
