#include "server/auth.h"

#include <grpc/grpc_security_constants.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"

namespace frost::server {

namespace {

// Constant-time comparison (the time does not depend on where the strings differ).
bool same_token(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % b.size()]);
  return diff == 0;
}

absl::StatusOr<std::string> read_token(const std::string& file, const std::string& env,
                                       const std::string& file_field) {
  if (!file.empty()) {
    absl::StatusOr<std::string> t = read_file(file, 4096, "4096 bytes");
    if (!t.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(file_field, ": cannot read the token file \"", file, "\": ", t.status().message()));
    std::string tok(absl::StripTrailingAsciiWhitespace(t->substr(0, t->find('\n'))));
    if (tok.empty())
      return absl::InvalidArgumentError(absl::StrCat(file_field, ": token file \"", file, "\" is empty"));
    return tok;
  }
  if (env.empty()) return std::string();
  const char* v = std::getenv(env.c_str());
  return std::string(v ? absl::StripTrailingAsciiWhitespace(v) : "");
}

}  // namespace

const std::map<std::string, AuthRule>& auth_rules() {
  static const auto* rules = new std::map<std::string, AuthRule>{
      {"/frost.v1.Generation/Generate", AuthRule::kInference},
      {"/frost.v1.Generation/Tokenize", AuthRule::kInference},
      {"/frost.v1.Generation/GetModelInfo", AuthRule::kInference},
      {"/frost.v1.Generation/Embed", AuthRule::kInference},
      {"/frost.v1.Prediction/Predict", AuthRule::kInference},
      // The Open Inference Protocol for the Predict model: Predict's rules.
      {"/inference.GRPCInferenceService/ServerLive", AuthRule::kInference},
      {"/inference.GRPCInferenceService/ServerReady", AuthRule::kInference},
      {"/inference.GRPCInferenceService/ModelReady", AuthRule::kInference},
      {"/inference.GRPCInferenceService/ServerMetadata", AuthRule::kInference},
      {"/inference.GRPCInferenceService/ModelMetadata", AuthRule::kInference},
      {"/inference.GRPCInferenceService/ModelInfer", AuthRule::kInference},
      {"/frost.v1.Training/SubmitJob", AuthRule::kAdmin},
      {"/frost.v1.Training/GetJob", AuthRule::kAdmin},
      {"/frost.v1.Training/ListJobs", AuthRule::kAdmin},
      {"/frost.v1.Training/CancelJob", AuthRule::kAdmin},
      {"/frost.v1.Training/WatchJob", AuthRule::kAdmin},
      {"/frost.v1.Admin/GetServerInfo", AuthRule::kAdmin},
      {"/frost.v1.Admin/ListArtifacts", AuthRule::kAdmin},
      {"/frost.v1.Admin/ActivateArtifact", AuthRule::kAdmin},
      {"/frost.v1.Admin/DeleteArtifact", AuthRule::kAdmin},
  };
  return *rules;
}

absl::StatusOr<Authenticator> Authenticator::create(const AuthSection& cfg) {
  Authenticator a;
  absl::StatusOr<std::string> admin =
      read_token(cfg.admin_token_file, cfg.admin_token_env, "auth.admin_token_file");
  if (!admin.ok()) return admin.status();
  absl::StatusOr<std::string> user =
      read_token(cfg.user_token_file, cfg.user_token_env, "auth.user_token_file");
  if (!user.ok()) return user.status();
  if (!admin->empty() && *admin == *user)
    return absl::InvalidArgumentError("auth: the admin and user tokens must differ");
  a.admin_ = *std::move(admin);
  a.user_ = *std::move(user);
  a.require_for_inference_ = cfg.require_for_inference;
  a.require_tls_ = cfg.require_tls;
  return a;
}

absl::Status Authenticator::check(const std::string& method, const std::string* authorization) const {
  auto it = auth_rules().find(method);
  if (it == auth_rules().end())
    return absl::PermissionDeniedError(absl::StrCat(method, ": no authorization rule (refused)"));
  const AuthRule rule = it->second;
  if (rule == AuthRule::kInference && !require_for_inference_) return absl::OkStatus();
  if (rule == AuthRule::kAdmin && admin_.empty())
    return absl::UnauthenticatedError(
        "no admin token is configured on this server (auth.admin_token_file or auth.admin_token_env)");
  if (authorization == nullptr)
    return absl::UnauthenticatedError("missing credentials: send metadata \"authorization: Bearer <token>\"");
  absl::string_view v = *authorization;
  if (!absl::ConsumePrefix(&v, "Bearer ") && !absl::ConsumePrefix(&v, "bearer "))
    return absl::UnauthenticatedError("malformed authorization metadata: expected \"Bearer <token>\"");
  const std::string tok(absl::StripAsciiWhitespace(v));
  if (same_token(tok, admin_)) return absl::OkStatus();
  if (same_token(tok, user_)) {
    if (rule == AuthRule::kInference) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(method, " needs the admin token; this is a user token"));
  }
  return absl::UnauthenticatedError("invalid bearer token");
}

int64_t call_metadata_bytes(const grpc::ServerContextBase& ctx) {
  constexpr int64_t kEntryOverhead = 32;  // RFC 7540 §6.5.2
  int64_t n = 0;
  for (const auto& [k, v] : ctx.client_metadata())
    n += static_cast<int64_t>(k.size()) + static_cast<int64_t>(v.size()) + kEntryOverhead;
  return n;
}

absl::Status check_metadata_size(const grpc::ServerContextBase& ctx, int64_t limit) {
  if (limit <= 0) return absl::OkStatus();
  const int64_t n = call_metadata_bytes(ctx);
  if (n <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("request metadata is ", n, " bytes, over server.max_header_list_bytes=", limit));
}

int64_t transport_header_list_bytes(int64_t n) { return std::max<int64_t>(4 * n, 64 * 1024); }

absl::Status Authenticator::check(const std::string& method, const grpc::CallbackServerContext* ctx) const {
  FROST_RETURN_IF_ERROR(check_metadata_size(*ctx, max_metadata_bytes_));
  if (require_tls_) {
    std::shared_ptr<const grpc::AuthContext> ac = ctx->auth_context();
    const std::vector<grpc::string_ref> t = ac ? ac->FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME)
                                               : std::vector<grpc::string_ref>{};
    const std::string type = t.empty() ? "" : std::string(t.front().data(), t.front().size());
    if (type != GRPC_TLS_TRANSPORT_SECURITY_TYPE && type != GRPC_SSL_TRANSPORT_SECURITY_TYPE)
      return absl::UnauthenticatedError("this server accepts calls only over TLS (auth.require_tls)");
  }
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return check(method, static_cast<const std::string*>(nullptr));
  const std::string v(it->second.data(), it->second.size());
  return check(method, &v);
}

}  // namespace frost::server
