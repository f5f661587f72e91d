// End-to-end tests of frostd's gRPC server reflection (harness: tests/testing/e2e_harness.h): the services
// are listed and frost.v1.Generation is described as grpcurl needs it; server.reflection: false turns it off.
#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "integration/proto/reflection_v1alpha.grpc.pb.h"
#include "tests/testing/e2e_harness.h"

namespace frost::e2e {
namespace {

namespace refl = grpc::reflection::v1alpha;

// One request on a fresh ServerReflectionInfo stream, as grpcurl sends it; the status and the response.
grpc::Status Reflect(Frostd& f, const refl::ServerReflectionRequest& req,
                     refl::ServerReflectionResponse* resp) {
  auto stub = refl::ServerReflection::NewStub(f.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->ServerReflectionInfo(&ctx);
  stream->Write(req);
  stream->WritesDone();
  const bool got = stream->Read(resp);
  const grpc::Status st = stream->Finish();
  if (st.ok() && !got) return grpc::Status(grpc::StatusCode::UNKNOWN, "no reflection response");
  return st;
}

class GrpcE2eReflection : public E2eTest {};

TEST_F(GrpcE2eReflection, ListsServicesAndDescribesGenerate) {
  Frostd* f = Own(std::make_unique<Frostd>());
  ASSERT_TRUE(f->Start(FrostdOptions()));

  refl::ServerReflectionRequest list;
  list.set_list_services("");
  refl::ServerReflectionResponse resp;
  grpc::Status st = Reflect(*f, list, &resp);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  std::vector<std::string> names;
  for (const refl::ServiceResponse& svc : resp.list_services_response().service())
    names.push_back(svc.name());
  for (const char* want : {"frost.v1.Generation", "grpc.health.v1.Health"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want << " not listed";
  }

  // The file defining frost.v1.Generation, as grpcurl fetches it to build a request: it has the three methods
  // with their real message types, and Generate is server streaming.
  refl::ServerReflectionRequest sym;
  sym.set_file_containing_symbol("frost.v1.Generation");
  st = Reflect(*f, sym, &resp);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  ASSERT_FALSE(resp.has_error_response()) << resp.error_response().error_message();
  bool found = false;
  for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    if (file.name() != "frost/v1/generation.proto") continue;
    found = true;
    ASSERT_EQ(file.service_size(), 1);
    std::map<std::string, const google::protobuf::MethodDescriptorProto*> methods;
    for (const auto& m : file.service(0).method()) methods[m.name()] = &m;
    ASSERT_EQ(methods.size(), 4u);
    ASSERT_TRUE(methods.count("Generate"));
    EXPECT_EQ(methods["Generate"]->input_type(), ".frost.v1.GenerateRequest");
    EXPECT_EQ(methods["Generate"]->output_type(), ".frost.v1.GenerateResponse");
    EXPECT_TRUE(methods["Generate"]->server_streaming());
    EXPECT_TRUE(methods.count("Tokenize") && methods.count("GetModelInfo"));
    ASSERT_TRUE(methods.count("Embed"));
    EXPECT_EQ(methods["Embed"]->input_type(), ".frost.v1.EmbedRequest");
    EXPECT_EQ(methods["Embed"]->output_type(), ".frost.v1.EmbedResponse");
  }
  EXPECT_TRUE(found) << "frost/v1/generation.proto not among the returned files";

  // grpcurl ... grpc.health.v1.Health/Check with reflection only: the health service resolves too.
  refl::ServerReflectionRequest health;
  health.set_file_containing_symbol("grpc.health.v1.Health");
  st = Reflect(*f, health, &resp);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  ASSERT_FALSE(resp.has_error_response()) << resp.error_response().error_message();
  bool health_found = false;
  for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    for (const auto& svc : file.service()) {
      if (file.package() != "grpc.health.v1" || svc.name() != "Health") continue;
      health_found = true;
      std::vector<std::string> methods;
      for (const auto& m : svc.method()) methods.push_back(m.name());
      EXPECT_NE(std::find(methods.begin(), methods.end(), "Check"), methods.end());
      EXPECT_NE(std::find(methods.begin(), methods.end(), "Watch"), methods.end());
    }
  }
  EXPECT_TRUE(health_found) << "no grpc.health.v1.Health service among the returned files";
  EXPECT_TRUE(f->StopCleanly());
}

TEST_F(GrpcE2eReflection, ConfigFlagTurnsItOff) {
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions opts;
  opts.yaml = std::string(kBaseYaml) + "server:\n  reflection: false\n";
  ASSERT_TRUE(f->Start(opts));
  refl::ServerReflectionRequest list;
  list.set_list_services("");
  refl::ServerReflectionResponse resp;
  const grpc::Status st = Reflect(*f, list, &resp);
  EXPECT_EQ(st.error_code(), StatusCode::UNIMPLEMENTED) << st.error_message();
  // Serving is unaffected.
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), LongRequest(3)), 3));
  EXPECT_TRUE(f->StopCleanly());
}

}  // namespace
}  // namespace frost::e2e
