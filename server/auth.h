#pragma once
// Bearer-token authorization of every frost RPC.
//
// Each method has a rule (auth_rules(), keyed by the full gRPC method name):
//   kAdmin      Training.*, Admin.*: the admin token only (the user token → PERMISSION_DENIED);
//   kInference  Generation.*, Prediction.*: open, or the user or admin token when
//               auth.require_for_inference is set.
// Health and reflection are gRPC's own services and stay open. A method with no rule is refused
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

 private:
  std::string admin_, user_;
  bool require_for_inference_ = false;
  bool require_tls_ = false;
};

}  // namespace frost::server
