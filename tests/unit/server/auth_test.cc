// Authorization rules: every frost.v1 method has one, and the token checks answer as documented.
#include "server/auth.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "frost/v1/admin.grpc.pb.h"
#include "frost/v1/generation.grpc.pb.h"
#include "frost/v1/prediction.grpc.pb.h"
#include "frost/v1/training.grpc.pb.h"
#include "inference/open_inference.grpc.pb.h"

namespace frost::server {
namespace {

// Every method of every service frostd serves from its own protos (frost.v1 and the Open Inference
// Protocol's inference.GRPCInferenceService), by full gRPC name.
std::vector<std::string> all_frost_methods() {
  std::vector<std::string> out;
  for (const google::protobuf::FileDescriptor* f :
       {v1::GenerateRequest::descriptor()->file(), v1::PredictRequest::descriptor()->file(),
        v1::SubmitJobRequest::descriptor()->file(), v1::ServerInfoRequest::descriptor()->file(),
        inference::ModelInferRequest::descriptor()->file()}) {
    for (int s = 0; s < f->service_count(); ++s) {
      const google::protobuf::ServiceDescriptor* svc = f->service(s);
      for (int m = 0; m < svc->method_count(); ++m)
        out.push_back("/" + svc->full_name() + "/" + svc->method(m)->name());
    }
  }
  return out;
}

TEST(AuthRules, EveryMethodOfEveryServiceHasARule) {
  const std::vector<std::string> methods = all_frost_methods();
  ASSERT_GE(methods.size(), 19u);
  for (const std::string& m : methods) EXPECT_TRUE(auth_rules().count(m)) << m << " has no auth rule";
  // and no rule names a method that does not exist (a renamed method must not keep a stale rule)
  for (const auto& [m, rule] : auth_rules())
    EXPECT_NE(std::find(methods.begin(), methods.end(), m), methods.end()) << "stale rule " << m;
}

TEST(AuthRules, TrainingAndAdminNeedTheAdminToken) {
  for (const auto& [m, rule] : auth_rules()) {
    const bool admin = m.rfind("/frost.v1.Training/", 0) == 0 || m.rfind("/frost.v1.Admin/", 0) == 0;
    EXPECT_EQ(rule == AuthRule::kAdmin, admin) << m;
  }
}

class AuthTest : public ::testing::Test {
 protected:
  static Authenticator make(bool require_inference) {
    AuthSection a;
    a.admin_token_env = "FROST_TEST_ADMIN_TOKEN";
    a.user_token_env = "FROST_TEST_USER_TOKEN";
    a.require_for_inference = require_inference;
    setenv("FROST_TEST_ADMIN_TOKEN", "s3cret-admin", 1);
    setenv("FROST_TEST_USER_TOKEN", "s3cret-user", 1);
    auto r = Authenticator::create(a);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  }
};

TEST_F(AuthTest, AdminMethodMatrix) {
  Authenticator a = make(false);
  const std::string m = "/frost.v1.Training/SubmitJob";
  const std::string admin = "Bearer s3cret-admin", user = "Bearer s3cret-user", bad = "Bearer nope",
                    basic = "Basic s3cret-admin";
  EXPECT_TRUE(a.check(m, &admin).ok());
  EXPECT_EQ(a.check(m, static_cast<const std::string*>(nullptr)).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a.check(m, &bad).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a.check(m, &basic).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a.check(m, &user).code(), absl::StatusCode::kPermissionDenied);
  // no message ever carries a token
  for (const std::string* h : {&admin, &user, &bad, &basic}) {
    const std::string msg(a.check(m, h).message());
    EXPECT_EQ(msg.find("s3cret"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("nope"), std::string::npos) << msg;
  }
}

TEST_F(AuthTest, InferenceIsOpenUnlessRequired) {
  const std::string m = "/frost.v1.Prediction/Predict", user = "Bearer s3cret-user",
                    admin = "Bearer s3cret-admin";
  Authenticator open = make(false);
  EXPECT_TRUE(open.check(m, static_cast<const std::string*>(nullptr)).ok());
  Authenticator closed = make(true);
  EXPECT_EQ(closed.check(m, static_cast<const std::string*>(nullptr)).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(closed.check(m, &user).ok());
  EXPECT_TRUE(closed.check(m, &admin).ok());
}

TEST_F(AuthTest, UnknownMethodIsRefused) {
  Authenticator a = make(false);
  const std::string admin = "Bearer s3cret-admin";
  EXPECT_EQ(a.check("/frost.v1.Training/DropAll", &admin).code(), absl::StatusCode::kPermissionDenied);
}

TEST(AuthConfig, NoAdminTokenRefusesAdminMethods) {
  AuthSection s;
  s.admin_token_env = "FROST_TEST_UNSET_TOKEN_VAR";
  s.user_token_env = "";
  unsetenv("FROST_TEST_UNSET_TOKEN_VAR");
  auto a = Authenticator::create(s);
  ASSERT_TRUE(a.ok());
  const std::string any = "Bearer x";
  EXPECT_EQ(a->check("/frost.v1.Admin/ListArtifacts", &any).code(), absl::StatusCode::kUnauthenticated);
}

TEST(AuthConfig, TokenFileIsReadAndItsErrorsNameTheFieldNotTheToken) {
  const std::string path = ::testing::TempDir() + "/frost_admin_token";
  std::ofstream(path) << "file-token-123\n";
  AuthSection s;
  s.admin_token_file = path;
  s.user_token_env = "";
  auto a = Authenticator::create(s);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string good = "Bearer file-token-123";
  EXPECT_TRUE(a->check("/frost.v1.Admin/ListArtifacts", &good).ok());
  std::ofstream(path) << "\n";
  auto empty = Authenticator::create(s);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("auth.admin_token_file"), std::string::npos);
  s.admin_token_file = path + ".missing";
  auto missing = Authenticator::create(s);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace frost::server
