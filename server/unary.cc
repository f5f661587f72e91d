#include "server/unary.h"

#include "absl/strings/str_cat.h"

namespace frost::server {

absl::Status admit(const UnaryServer& s, grpc::CallbackServerContext* ctx, const char* rpc,
                   bool refuse_while_draining) {
  absl::Status st = s.auth ? s.auth->check(absl::StrCat("/", s.service, "/", rpc), ctx)
                           : check_metadata_size(*ctx, s.max_metadata_bytes);
  if (st.ok() && refuse_while_draining && s.draining && s.draining())
    st = absl::UnavailableError("server is draining: not accepting new requests");
  return st;
}

void finish_unary(Metrics* metrics, const char* rpc, grpc::ServerUnaryReactor* reactor, int64_t t0_ns,
                  const absl::Status& st) {
  const grpc::Status gs = to_grpc_status(st);
  if (metrics) metrics->record_request(rpc, gs.error_code(), seconds_since(t0_ns));
  reactor->Finish(gs);
}

}  // namespace frost::server
