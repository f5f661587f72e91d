#pragma once
// Bearer-token authorization of every frost RPC.
//
// Each method has a rule (auth_rules(), keyed by the full gRPC method name):
//   kAdmin      Training.*, Admin.*: the admin token only (the user token → PERMISSION_DENIED);
//   kInference  Generation.*, Prediction.*: open, or the user or admin token when
//               auth.require_for_inference is set.
// Health (frost's own grpc.health.v1, server/health.h) and reflection stay open. A method with no rule is refused
// (fail closed); tests/unit/server/auth_test.cc enumerates every method of every frost.v1 service
// and fails when one has no rule.
//
// Tokens come from a file (first line, trailing whitespace dropped) or an environment variable,
// read once at start; they are compared in constant time and never logged or exported.
// Errors: no or malformed "authorization" metadata / unknown token → UNAUTHENTICATED; the user
// token on an admin method → PERMISSION_DENIED. Messages never contain the token.
#include <grpcpp/server_context.h>

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/server_config.h"

namespace frost::server {

enum class AuthRule { kAdmin, kInference };

// "/frost.v1.Training/SubmitJob" → rule, for every frost.v1 method.
const std::map<std::string, AuthRule>& auth_rules();

// The size of a call's request metadata as HTTP/2 counts a header list (RFC 7540 §6.5.2: name + value + 32 per
// entry), over what the application sees (gRPC's own and pseudo headers excluded).
int64_t call_metadata_bytes(const grpc::ServerContextBase& ctx);
// RESOURCE_EXHAUSTED "request metadata is N bytes, over server.max_header_list_bytes=M" (OK when limit <= 0).
//
// Why per call and not only in the transport: gRPC 1.51 ends the whole HTTP/2 connection — every call on it,
// a healthy WatchJob or Health.Watch included — when one header block exceeds the transport's limit. So the
// transport's limit (SETTINGS_MAX_HEADER_LIST_SIZE: transport_header_list_bytes) is kept well above
// server.max_header_list_bytes and frostd refuses the one call that exceeds the latter.
absl::Status check_metadata_size(const grpc::ServerContextBase& ctx, int64_t limit);
// The HTTP/2 limit for server.max_header_list_bytes = n: max(4·n, 64 KiB).
int64_t transport_header_list_bytes(int64_t n);

class Authenticator {
 public:
  // Reads the tokens. INVALID_ARGUMENT naming the config field for an unreadable or empty token
  // file (the file, never its content).
  static absl::StatusOr<Authenticator> create(const AuthSection& cfg);

  // OK when a call with this "authorization" metadata value may run `method` (full name).
  absl::Status check(const std::string& method, const std::string* authorization) const;
  // Same, reading the metadata from the call; with auth.require_tls, a call that did not arrive over TLS is
  // UNAUTHENTICATED whatever it carries.
  absl::Status check(const std::string& method, const grpc::CallbackServerContext* ctx) const;

  bool has_admin_token() const { return !admin_.empty(); }

  // server.max_header_list_bytes, checked per call by check(method, ctx) before anything else: a call whose
  // metadata is larger is RESOURCE_EXHAUSTED alone (see call_metadata_bytes). 0 = unchecked.
  void set_max_metadata_bytes(int64_t n) { max_metadata_bytes_ = n; }

 private:
  int64_t max_metadata_bytes_ = 0;
  std::string admin_, user_;
  bool require_for_inference_ = false;
  bool require_tls_ = false;
};

}  // namespace frost::server
