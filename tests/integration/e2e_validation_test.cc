// End-to-end tests of frostd's request validation (harness: tests/testing/e2e_harness.h): every bad
// request is INVALID_ARGUMENT naming the field, before any model work, and requests exactly at the limits
// are accepted. A hostile client: bytes that are no request message get INVALID_ARGUMENT naming the type on
// every method of every service (found through reflection, so a new method cannot be left out), every
// repeated request field has a cap named in its refusal, and grpc.health.v1.Health's Check and Watch agree.
#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "frost/v1/admin.grpc.pb.h"
#include "frost/v1/prediction.grpc.pb.h"
#include "frost/v1/training.grpc.pb.h"
#include "inference/open_inference.grpc.pb.h"
#include "integration/proto/reflection_v1alpha.grpc.pb.h"
#include "tests/testing/e2e_harness.h"

namespace frost::e2e {
namespace {

class GrpcE2eValidation : public E2eTest {
 protected:
  static void TearDownTestSuite() { shared_.Stop(); }
  static FrostdOptions Options() {
    FrostdOptions o;
    o.model = "builtin:tiny";  // byte tokenizer: a text prompt is 1 (BOS) + its bytes tokens
    o.yaml = std::string(kBaseYaml) +
             "engine:\n"
             "  max_context: 64\n"
             "limits:\n"
             "  max_prompt_bytes: 48\n"
             "  max_prompt_tokens: 24\n"
             "  max_new_tokens: 100\n"
             "  max_stop_strings: 2\n"
             "  max_stop_bytes: 8\n"
             "  max_logprobs: 2\n";
    return o;
  }
  static SharedFrostd shared_;
};
SharedFrostd GrpcE2eValidation::shared_;

struct BadRequest {
  std::string name;
  std::function<void(v1::GenerateRequest&)> mutate;
  std::vector<std::string> message_parts;  // the field (as the server names it) and the value
};

TEST_F(GrpcE2eValidation, EachBadRequestIsInvalidArgumentBeforeAnyModelWork) {
  FROST_USE_SHARED(f, shared_, Options());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto sp = [](v1::GenerateRequest& r) { return r.mutable_sampling(); };
  // Field names: proto paths, from the edge checks ("sampling.logprobs", "kv.codec") and from the engine's
  // (their field mapped by server/generation_codec.h: "sampling.temperature", "token_ids.ids[1]").
  const std::vector<BadRequest> cases = {
      {"no prompt",
       [](v1::GenerateRequest& r) { r.clear_prompt(); },
       {"prompt", "text, token_ids or messages"}},
      {"empty text", [](v1::GenerateRequest& r) { r.set_text(""); }, {"text", "must not be empty"}},
      {"text over max_prompt_bytes",
       [](v1::GenerateRequest& r) { r.set_text(std::string(49, 'a')); },
       {"text", "49 bytes", "max_prompt_bytes = 48"}},
      {"prompt over max_prompt_tokens",
       [](v1::GenerateRequest& r) { r.set_text(std::string(30, 'a')); },
       {"31 tokens", "max_prompt_tokens = 24"}},
      {"max_new_tokens 0",
       [&](v1::GenerateRequest& r) { sp(r)->set_max_new_tokens(0); },
       {"max_new_tokens", "got 0"}},
      {"max_new_tokens -1",
       [&](v1::GenerateRequest& r) { sp(r)->set_max_new_tokens(-1); },
       {"max_new_tokens", "got -1"}},
      {"max_new_tokens over the limit",
       [&](v1::GenerateRequest& r) { sp(r)->set_max_new_tokens(101); },
       {"max_new_tokens", "[1, 100]", "got 101"}},
      {"prompt + max_new_tokens over the context",
       [&](v1::GenerateRequest& r) {
         r.set_text(std::string(20, 'a'));  // 21 tokens
         sp(r)->set_max_new_tokens(50);
       },
       {"prompt tokens (21)", "max_new_tokens (50)", "71", "context length 64"}},
      {"temperature -1",
       [&](v1::GenerateRequest& r) { sp(r)->set_temperature(-1); },
       {"temperature", "got -1"}},
      {"temperature NaN",
       [&](v1::GenerateRequest& r) { sp(r)->set_temperature(nan); },
       {"temperature", "nan"}},
      {"top_p 0", [&](v1::GenerateRequest& r) { sp(r)->set_top_p(0); }, {"top_p", "(0, 1]", "got 0"}},
      {"top_p 1.5", [&](v1::GenerateRequest& r) { sp(r)->set_top_p(1.5f); }, {"top_p", "got 1.5"}},
      {"top_p NaN", [&](v1::GenerateRequest& r) { sp(r)->set_top_p(nan); }, {"top_p", "nan"}},
      {"top_k -1", [&](v1::GenerateRequest& r) { sp(r)->set_top_k(-1); }, {"top_k", "got -1"}},
      {"min_p 1.5", [&](v1::GenerateRequest& r) { sp(r)->set_min_p(1.5f); }, {"min_p", "got 1.5"}},
      {"repetition_penalty 0",
       [&](v1::GenerateRequest& r) { sp(r)->set_repetition_penalty(0); },
       {"repetition_penalty", "got 0"}},
      {"presence_penalty 3",
       [&](v1::GenerateRequest& r) { sp(r)->set_presence_penalty(3); },
       {"presence_penalty", "got 3"}},
      {"too many stop strings",
       [&](v1::GenerateRequest& r) {
         for (const char* s : {"a", "b", "c"}) sp(r)->add_stop(s);
       },
       {"stop", "at most 2", "got 3"}},
      {"too long stop string",
       [&](v1::GenerateRequest& r) { sp(r)->add_stop("123456789"); },
       {"stop[0]", "8 bytes", "got 9"}},
      {"empty stop string",
       [&](v1::GenerateRequest& r) { sp(r)->add_stop(""); },
       {"stop[0]", "must not be empty"}},
      {"stop token id out of vocab",
       [&](v1::GenerateRequest& r) { sp(r)->add_stop_token_ids(600); },
       {"stop_token_ids[0]", "512", "got 600"}},
      {"logprobs over max_logprobs",
       [&](v1::GenerateRequest& r) { sp(r)->set_logprobs(3); },
       {"logprobs", "[0, 2]", "got 3"}},
      {"logprobs -1", [&](v1::GenerateRequest& r) { sp(r)->set_logprobs(-1); }, {"logprobs", "got -1"}},
      {"unknown kv codec",
       [](v1::GenerateRequest& r) { r.mutable_kv()->set_codec("fp8"); },
       {"kv.codec", "\"fp8\""}},
      {"token id out of vocab",
       [](v1::GenerateRequest& r) {
         for (int32_t id : {1, 512, 70}) r.mutable_token_ids()->add_ids(id);
       },
       {"ids[1]", "512", "out of range [0, 512)"}},
      {"empty token ids",
       [](v1::GenerateRequest& r) { r.mutable_token_ids(); },
       {"token_ids.ids", "must not be empty"}},
      {"request_id over 128 bytes",
       [](v1::GenerateRequest& r) { r.set_request_id(std::string(129, 'r')); },
       {"request_id", "129 bytes"}},
  };

  const Scrape before = f->WaitIdle();
  ASSERT_TRUE(before.ok()) << before.error();
  for (const BadRequest& c : cases) {
    v1::GenerateRequest req;
    req.set_text("Hello");
    req.mutable_sampling()->set_max_new_tokens(8);
    c.mutate(req);
    EXPECT_TRUE(Refused(RunGenerate(f->stub(), req), StatusCode::INVALID_ARGUMENT, c.message_parts))
        << c.name;
  }
  const double n = static_cast<double>(cases.size());
  auto delta = [&](const Scrape& s, const std::string& name,
                   const std::map<std::string, std::string>& m = {}) {
    return s.Count(name, m) - before.Count(name, m);
  };
  const Scrape after = f->WaitMetrics([&](const Scrape& s) {
    return delta(s, "frost_requests_total", {{"rpc", "Generate"}, {"code", "INVALID_ARGUMENT"}}) >= n;
  });
  EXPECT_EQ(delta(after, "frost_requests_rejected_total", {{"reason", "invalid_argument"}}), n);
  EXPECT_EQ(delta(after, "frost_requests_total", {{"rpc", "Generate"}, {"code", "INVALID_ARGUMENT"}}), n);
  // No model work: no prompt tokens, no generated tokens, no generation of any kind, no first token.
  EXPECT_EQ(delta(after, "frost_prompt_tokens_total"), 0);
  EXPECT_EQ(delta(after, "frost_generation_tokens_total"), 0);
  EXPECT_EQ(delta(after, "frost_time_to_first_token_seconds_count"), 0);
  EXPECT_EQ(after.Count("frost_generations_total"), before.Count("frost_generations_total"));

  // Control: requests exactly at every limit are accepted (the limits are not off by one).
  v1::GenerateRequest edge;
  edge.set_text(std::string(23, 'a'));              // 24 tokens = max_prompt_tokens
  edge.mutable_sampling()->set_max_new_tokens(40);  // 24 + 40 = 64 = max_context
  edge.mutable_sampling()->set_ignore_eos(true);
  edge.mutable_sampling()->set_logprobs(2);
  // A fixed seed: with a random one the model can draw the byte token <0x01> and stop early (seen once).
  // Seed 1 is checked to generate 40 tokens without a \x01 byte on this test's model.
  edge.mutable_sampling()->set_seed(1);
  edge.mutable_sampling()->add_stop("\x01\x02\x03\x04\x05\x06\x07\x08");  // 8 bytes, never generated
  edge.mutable_sampling()->add_stop("\x01");
  const StreamOutcome ok = RunGenerate(f->stub(), edge);
  EXPECT_TRUE(CompletedWithLength(ok, 40));
  EXPECT_EQ(ok.final.prompt_tokens(), 24);
}

TEST_F(GrpcE2eValidation, TokenizeChecksItsText) {
  FROST_USE_SHARED(f, shared_, Options());
  v1::TokenizeResponse resp;
  grpc::Status st = f->Tokenize("", &resp);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("text: must not be empty"), std::string::npos) << st.error_message();
  st = f->Tokenize(std::string(49, 'a'), &resp);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("max_prompt_bytes = 48"), std::string::npos) << st.error_message();
  st = f->Tokenize("ab", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(std::vector<int32_t>(resp.token_ids().begin(), resp.token_ids().end()),
            (std::vector<int32_t>{1, 3 + 'a', 3 + 'b'}));
}

// Invalid UTF-8 in a proto3 `string` field: protobuf's parser refuses such a message, so with typed callback
// methods gRPC would answer UNIMPLEMENTED with an empty message before frostd saw it. Generate and Tokenize
// parse the request bytes themselves (server/proto_codec.h), so the client gets INVALID_ARGUMENT naming the
// field, counted like every other invalid request, and nothing is generated. (The C++ client serializes such
// strings after logging a protobuf ERROR; clients in other languages can send them too.)
TEST_F(GrpcE2eValidation, InvalidUtf8IsInvalidArgumentNamingTheField) {
  FROST_USE_SHARED(f, shared_, Options());
  const Scrape before = f->WaitIdle();
  ASSERT_TRUE(before.ok()) << before.error();
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), LongRequest(4, 1, "ab\xff\xfe")), StatusCode::INVALID_ARGUMENT,
                      {"text: not valid UTF-8", "offset 2 of 4"}));

  v1::GenerateRequest stop = LongRequest(4);
  stop.mutable_sampling()->add_stop("fine");
  stop.mutable_sampling()->add_stop("\xc3");
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), stop), StatusCode::INVALID_ARGUMENT,
                      {"sampling.stop[1]: not valid UTF-8"}));

  v1::GenerateRequest rid = LongRequest(4);
  rid.set_request_id("id-\xed\xa0\x80");  // a UTF-8-encoded surrogate
  EXPECT_TRUE(
      Refused(RunGenerate(f->stub(), rid), StatusCode::INVALID_ARGUMENT, {"request_id: not valid UTF-8"}));
  {
    v1::TokenizeResponse tresp;
    const grpc::Status ts = f->Tokenize("\xff", &tresp);
    EXPECT_EQ(ts.error_code(), StatusCode::INVALID_ARGUMENT) << ts.error_message();
    EXPECT_NE(ts.error_message().find("text: not valid UTF-8"), std::string::npos) << ts.error_message();
  }

  // The server is unharmed and counted each refusal as an invalid request, with no model work.
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), LongRequest(4)), 4));
  auto delta = [&](const Scrape& s, const std::string& name, const std::map<std::string, std::string>& m) {
    return s.Count(name, m) - before.Count(name, m);
  };
  const std::map<std::string, std::string> generate_bad = {{"rpc", "Generate"}, {"code", "INVALID_ARGUMENT"}};
  const Scrape after = f->WaitMetrics([&](const Scrape& s) {
    return delta(s, "frost_requests_total", {{"rpc", "Generate"}, {"code", "OK"}}) == 1 &&
           delta(s, "frost_requests_total", generate_bad) == 3;
  });
  EXPECT_EQ(delta(after, "frost_requests_total", generate_bad), 3);
  EXPECT_EQ(delta(after, "frost_requests_total", {{"rpc", "Tokenize"}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(delta(after, "frost_requests_rejected_total", {{"reason", "invalid_argument"}}), 3);
  EXPECT_EQ(after.Count("frost_generations_total") - before.Count("frost_generations_total"), 1);
  EXPECT_TRUE(f->Alive());
}

// ------------------------------------------------------------------------------------------- hostile client

namespace refl = grpc::reflection::v1alpha;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr char kAdminToken[] = "hostile-client-test-admin-token";
constexpr size_t kMaxHealthServiceBytesForTest = 256;  // server/health.h, kMaxHealthServiceBytes

// Bytes no request message parses from: a varint that never ends, and a length-delimited field 1 that claims
// more bytes than follow.
const std::vector<std::string>& GarbageRequests() {
  static const std::vector<std::string> garbage = {std::string(6, '\xff'), std::string("\x0a\x05" "ab", 4)};
  return garbage;
}

std::chrono::system_clock::time_point DeadlineIn(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// A client context with the admin token (accepted by every method) and a deadline.
void Prepare(grpc::ClientContext* ctx, int seconds = 30) {
  ctx->set_deadline(DeadlineIn(seconds));
  ctx->AddMetadata("authorization", std::string("Bearer ") + kAdminToken);
}

// One call of `method` ("/pkg.Service/Method") with `bytes` as its request, whatever the method's kind: the
// status and how many response messages came.
struct RawOutcome {
  grpc::Status status;
  int messages = 0;
};
RawOutcome RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                   const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  RawOutcome out;
  void* tag = nullptr;
  bool ok = false;
  auto next = [&] { return cq.Next(&tag, &ok); };
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, method, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  next();
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  next();
  for (;;) {
    grpc::ByteBuffer response;
    call->Read(&response, reinterpret_cast<void*>(3));
    if (!next() || !ok) break;
    if (++out.messages >= 16) {  // a stream that goes on (it should not): stop it
      ctx.TryCancel();
      break;
    }
  }
  call->Finish(&out.status, reinterpret_cast<void*>(4));
  next();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return out;
}

// The server's services, as reflection lists them.
std::vector<std::string> ListServices(Frostd& f) {
  auto stub = refl::ServerReflection::NewStub(f.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(30));
  auto stream = stub->ServerReflectionInfo(&ctx);
  refl::ServerReflectionRequest req;
  req.set_list_services("");
  stream->Write(req);
  stream->WritesDone();
  refl::ServerReflectionResponse resp;
  std::vector<std::string> names;
  if (stream->Read(&resp))
    for (const refl::ServiceResponse& svc : resp.list_services_response().service()) names.push_back(svc.name());
  EXPECT_TRUE(stream->Finish().ok());
  return names;
}

class GrpcE2eMalformed : public E2eTest {
 protected:
  static void TearDownTestSuite() { shared_.Stop(); }
  static FrostdOptions Options() {
    static const testing::TempDir dir("frost_malformed");
    const std::string token_file = dir.file("admin_token");
    testing::write_text_file(token_file, std::string(kAdminToken) + "\n");
    FrostdOptions o;
    o.model = "builtin:tiny";
    o.yaml = std::string(kBaseYaml) +
             "engine:\n"
             "  max_context: 64\n"
             "limits:\n"
             "  max_prompt_tokens: 24\n"
             "  max_stop_token_ids: 4\n"
             "  max_predict_texts: 3\n"
             "jobs:\n"
             "  max_inline_rows: 5\n"
             "auth:\n"
             "  admin_token_file: " +
             token_file + "\n";
    return o;
  }
  static SharedFrostd shared_;
};
SharedFrostd GrpcE2eMalformed::shared_;

// Every method of every service the server lists answers bytes that are no request message with
// INVALID_ARGUMENT and a message naming the request type, and streams nothing.
TEST_F(GrpcE2eMalformed, EveryMethodRefusesGarbageWithInvalidArgumentNamingTheType) {
  FROST_USE_SHARED(f, shared_, Options());
  // Link every generated file whose services frostd serves (the descriptors register on load).
  for (const google::protobuf::Descriptor* d :
       {v1::GenerateRequest::descriptor(), v1::PredictRequest::descriptor(), v1::SubmitJobRequest::descriptor(),
        v1::ServerInfoRequest::descriptor(), inference::ModelInferRequest::descriptor(),
        HealthCheckRequest::descriptor()})
    ASSERT_NE(d, nullptr);
  const std::vector<std::string> services = ListServices(*f);
  for (const char* want : {"frost.v1.Generation", "frost.v1.Prediction", "frost.v1.Training", "frost.v1.Admin",
                           "inference.GRPCInferenceService", "grpc.health.v1.Health"})
    EXPECT_NE(std::find(services.begin(), services.end(), want), services.end()) << want << " not served";

  int methods = 0;
  for (const std::string& name : services) {
    if (name.rfind("grpc.reflection.", 0) == 0) continue;  // gRPC's own, outside frost's contract
    const google::protobuf::ServiceDescriptor* svc =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    ASSERT_NE(svc, nullptr) << name << ": served but its descriptor is not linked into this test";
    for (int i = 0; i < svc->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = svc->method(i);
      const std::string path = "/" + svc->full_name() + "/" + m->name();
      ++methods;
      for (const std::string& bytes : GarbageRequests()) {
        const RawOutcome o = RawCall(f->channel(), path, bytes);
        EXPECT_EQ(o.status.error_code(), StatusCode::INVALID_ARGUMENT)
            << path << ": " << o.status.error_code() << " \"" << o.status.error_message() << "\"";
        EXPECT_NE(o.status.error_message().find(m->input_type()->full_name()), std::string::npos)
            << path << ": \"" << o.status.error_message() << "\" does not name " << m->input_type()->full_name();
        EXPECT_EQ(o.messages, 0) << path;
      }
    }
  }
  EXPECT_GE(methods, 21);
  // Refusals of frost's methods are counted like any invalid request; the server is unharmed.
  const Scrape s = f->Metrics();
  for (const char* rpc : {"GetModelInfo", "ModelInfer", "ServerLive", "SubmitJob", "Predict"})
    EXPECT_GE(s.Count("frost_requests_total", {{"rpc", rpc}, {"code", "INVALID_ARGUMENT"}}), 2) << rpc;
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), LongRequest(2)), 2));
  EXPECT_TRUE(f->Alive());
}

// The first message of a Watch of `service` (nullopt when none came), then the stream is cancelled; the
// call's status in *st.
std::optional<int> FirstWatchStatus(Frostd& f, const std::string& service, grpc::Status* st) {
  auto stub = grpc::health::v1::Health::NewStub(f.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineIn(30));
  HealthCheckRequest req;
  req.set_service(service);
  auto reader = stub->Watch(&ctx, req);
  HealthCheckResponse resp;
  std::optional<int> first;
  if (reader->Read(&resp)) {
    first = resp.status();
    ctx.TryCancel();
  }
  *st = reader->Finish();
  return first;
}

TEST_F(GrpcE2eMalformed, HealthCheckAndWatchAgree) {
  FROST_USE_SHARED(f, shared_, Options());
  const std::string check = "/grpc.health.v1.Health/Check", watch = "/grpc.health.v1.Health/Watch";
  // Garbage: the same refusal from both.
  for (const std::string& bytes : GarbageRequests()) {
    const RawOutcome c = RawCall(f->channel(), check, bytes), w = RawCall(f->channel(), watch, bytes);
    EXPECT_EQ(c.status.error_code(), StatusCode::INVALID_ARGUMENT) << c.status.error_message();
    EXPECT_EQ(w.status.error_code(), StatusCode::INVALID_ARGUMENT) << w.status.error_message();
    EXPECT_EQ(c.status.error_message(), w.status.error_message());
    EXPECT_NE(c.status.error_message().find("grpc.health.v1.HealthCheckRequest"), std::string::npos)
        << c.status.error_message();
  }
  // A service name over the cap: refused by both, naming the field; at the cap: an unknown service.
  const std::string over(kMaxHealthServiceBytesForTest + 1, 's'), at(kMaxHealthServiceBytesForTest, 's');
  HealthStatus hs{};
  grpc::Status st = f->Check(over, &hs);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("service: 257 bytes"), std::string::npos) << st.error_message();
  grpc::Status wst;
  EXPECT_FALSE(FirstWatchStatus(*f, over, &wst).has_value());
  EXPECT_EQ(wst.error_code(), StatusCode::INVALID_ARGUMENT) << wst.error_message();
  EXPECT_EQ(wst.error_message(), st.error_message());
  st = f->Check(at, &hs);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND) << st.error_message();
  // Unknown service: NOT_FOUND on Check, SERVICE_UNKNOWN on Watch (as gRPC's own health service answers).
  st = f->Check("no.such.Service", &hs);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND);
  EXPECT_FALSE(st.error_message().empty());
  EXPECT_EQ(FirstWatchStatus(*f, "no.such.Service", &wst), HealthCheckResponse::SERVICE_UNKNOWN);
  EXPECT_EQ(FirstWatchStatus(*f, at, &wst), HealthCheckResponse::SERVICE_UNKNOWN);
  // Known services: the same status from both.
  for (const std::string service : {kLiveness, kReadiness, "frost.v1.Training"}) {
    st = f->Check(service, &hs);
    ASSERT_TRUE(st.ok()) << "\"" << service << "\": " << st.error_message();
    EXPECT_EQ(hs, HealthCheckResponse::SERVING) << service;
    EXPECT_EQ(FirstWatchStatus(*f, service, &wst), HealthCheckResponse::SERVING) << service;
  }
}

// Many watchers hold no gRPC thread, see readiness go NOT_SERVING when the drain starts and end with OK at
// shutdown (liveness watchers: their last NOT_SERVING); frostd exits cleanly.
TEST_F(GrpcE2eMalformed, HealthWatchStreamsTheDrainToManyWatchers) {
  constexpr int kReadinessWatchers = 96, kLivenessWatchers = 32;
  Frostd* f = Own(std::make_unique<Frostd>());
  ASSERT_TRUE(f->Start(FrostdOptions()));
  struct Watcher {
    std::string service;
    std::vector<int> seen;
    grpc::Status status;
    std::atomic<bool> first{false};
  };
  std::vector<std::unique_ptr<Watcher>> ws;
  for (int i = 0; i < kReadinessWatchers + kLivenessWatchers; ++i) {
    ws.push_back(std::make_unique<Watcher>());
    ws.back()->service = i < kReadinessWatchers ? kReadiness : kLiveness;
  }
  auto stub = grpc::health::v1::Health::NewStub(f->channel());
  std::vector<std::thread> threads;
  for (auto& w : ws) {
    threads.emplace_back([&stub, w = w.get()] {
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineIn(120));
      HealthCheckRequest req;
      req.set_service(w->service);
      auto reader = stub->Watch(&ctx, req);
      HealthCheckResponse resp;
      while (reader->Read(&resp)) {
        w->seen.push_back(resp.status());
        w->first = true;
      }
      w->status = reader->Finish();
      w->first = true;
    });
  }
  struct JoinAll {
    std::vector<std::thread>& ts;
    ~JoinAll() {
      for (std::thread& t : ts)
        if (t.joinable()) t.join();
    }
  } join_all{threads};
  ASSERT_TRUE(PollUntil(60, [&] {
    return std::all_of(ws.begin(), ws.end(), [](const auto& w) { return w->first.load(); });
  }));
  // All watchers open: Check and Generate still answer at once (no gRPC thread is held by a watcher).
  HealthStatus hs{};
  const auto t0 = Clock::now();
  const grpc::Status st = f->Check(kReadiness, &hs);
  EXPECT_TRUE(st.ok() && hs == HealthCheckResponse::SERVING) << st.error_message();
  EXPECT_LT(SecondsSince(t0), 2.0);
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), LongRequest(2)), 2));

  f->Terminate();
  for (std::thread& t : threads) t.join();
  for (const auto& w : ws) {
    const std::vector<int> want = {HealthCheckResponse::SERVING, HealthCheckResponse::NOT_SERVING};
    EXPECT_EQ(w->seen, want) << "\"" << w->service << "\"";
    EXPECT_TRUE(w->status.ok()) << "\"" << w->service << "\": " << w->status.error_code() << " "
                                << w->status.error_message();
  }
  f->Disconnect();
  ASSERT_TRUE(f->WaitCleanExit(60));
}

// What a cap refusal says: "<field>: ... is more than ..." or "<field>: at most ...".
bool RefusedByCap(const grpc::Status& st) {
  const std::string& m = st.error_message();
  return st.error_code() == StatusCode::INVALID_ARGUMENT &&
         (m.find("is more than") != std::string::npos || m.find("at most") != std::string::npos);
}

::testing::AssertionResult RefusedNaming(const grpc::Status& st, const std::vector<std::string>& parts) {
  if (st.error_code() != StatusCode::INVALID_ARGUMENT)
    return ::testing::AssertionFailure() << "code " << st.error_code() << " \"" << st.error_message() << "\"";
  for (const std::string& p : parts)
    if (st.error_message().find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "\"" << st.error_message() << "\" lacks \"" << p << "\"";
  return ::testing::AssertionSuccess();
}

// Each repeated field a client controls has a cap: one past it is INVALID_ARGUMENT naming the field, the
// count and the cap; exactly at it the cap lets the request through (it may fail later for other reasons:
// no prototype artifact is active here).
TEST_F(GrpcE2eMalformed, EveryRepeatedFieldHasACapNamedInItsRefusal) {
  FROST_USE_SHARED(f, shared_, Options());
  auto predict = v1::Prediction::NewStub(f->channel());
  auto training = v1::Training::NewStub(f->channel());
  auto oip = inference::GRPCInferenceService::NewStub(f->channel());

  // Generation: sampling.stop_token_ids (limits.max_stop_token_ids = 4), token_ids.ids (max_prompt_tokens).
  auto with_stop_ids = [](int n) {
    v1::GenerateRequest r = LongRequest(2);
    for (int i = 0; i < n; ++i) r.mutable_sampling()->add_stop_token_ids(500 - i);
    return r;
  };
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), with_stop_ids(5)), StatusCode::INVALID_ARGUMENT,
                      {"sampling.stop_token_ids", "at most 4", "got 5"}));
  const StreamOutcome at_stop = RunGenerate(f->stub(), with_stop_ids(4));
  EXPECT_TRUE(at_stop.status.ok() && at_stop.has_final) << Describe(at_stop);
  auto with_ids = [](int n) {
    v1::GenerateRequest r = LongRequest(2);
    for (int i = 0; i < n; ++i) r.mutable_token_ids()->add_ids(10 + i);
    return r;
  };
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), with_ids(25)), StatusCode::INVALID_ARGUMENT,
                      {"token_ids.ids", "25 ids", "limits.max_prompt_tokens=24"}));
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), with_ids(24)), 2));

  // Prediction.texts (limits.max_predict_texts = 3).
  auto texts = [&](int n) {
    v1::PredictRequest r;
    for (int i = 0; i < n; ++i) r.add_texts("text " + std::to_string(i));
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::PredictResponse resp;
    return predict->Predict(&ctx, r, &resp);
  };
  EXPECT_TRUE(RefusedNaming(texts(4), {"texts", "4 texts", "limits.max_predict_texts=3"}));
  EXPECT_FALSE(RefusedByCap(texts(3))) << texts(3).error_message();

  // Training: each spec's config map (64), prototype inline rows (jobs.max_inline_rows = 5), ListJobs.states (6).
  auto submit = [&](const std::function<void(v1::SubmitJobRequest&)>& fill) {
    v1::SubmitJobRequest r;
    fill(r);
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::Job job;
    grpc::Status st = training->SubmitJob(&ctx, r, &job);
    if (st.ok()) {  // accepted: do not let it run
      grpc::ClientContext cctx;
      Prepare(&cctx);
      v1::CancelJobRequest c;
      c.set_id(job.id());
      training->CancelJob(&cctx, c, &job);
    }
    return st;
  };
  auto config = [](google::protobuf::Map<std::string, std::string>* m, int n) {
    for (int i = 0; i < n; ++i) (*m)["no_such_key_" + std::to_string(i)] = "1";
  };
  for (int n : {65, 64}) {
    const grpc::Status p = submit([&](v1::SubmitJobRequest& r) {
      r.mutable_prototype()->set_train_path("none.jsonl");
      config(r.mutable_prototype()->mutable_config(), n);
    });
    const grpc::Status k = submit([&](v1::SubmitJobRequest& r) {
      r.mutable_kv_repair()->set_calib_path("none.jsonl");
      config(r.mutable_kv_repair()->mutable_config(), n);
    });
    const grpc::Status s = submit([&](v1::SubmitJobRequest& r) {
      r.mutable_kvsplice()->set_calib_path("none.jsonl");
      config(r.mutable_kvsplice()->mutable_config(), n);
    });
    if (n == 65) {
      EXPECT_TRUE(RefusedNaming(p, {"prototype.config", "65 entries", "cap of 64"}));
      EXPECT_TRUE(RefusedNaming(k, {"kv_repair.config", "65 entries", "cap of 64"}));
      EXPECT_TRUE(RefusedNaming(s, {"kvsplice.config", "65 entries", "cap of 64"}));
    } else {
      EXPECT_FALSE(RefusedByCap(p)) << p.error_message();
      EXPECT_FALSE(RefusedByCap(k)) << k.error_message();
      EXPECT_FALSE(RefusedByCap(s)) << s.error_message();
    }
  }
  for (int n : {6, 5}) {
    const grpc::Status st = submit([&](v1::SubmitJobRequest& r) {
      for (int i = 0; i < n; ++i) {
        v1::TrainingRow* row = r.mutable_prototype()->mutable_inline_rows()->add_rows();
        row->set_text("row " + std::to_string(i));
        row->set_label(i);
      }
      r.mutable_prototype()->set_label_min(-1);
      r.mutable_prototype()->set_label_max(-2);  // refused later: no job is queued
    });
    if (n == 6) {
      EXPECT_TRUE(RefusedNaming(st, {"prototype.inline_rows.rows", "6 rows", "jobs.max_inline_rows=5"}));
    } else {
      EXPECT_FALSE(RefusedByCap(st)) << st.error_message();
    }
  }
  auto list = [&](int n) {
    v1::ListJobsRequest r;
    for (int i = 0; i < n; ++i) r.add_states(static_cast<v1::JobState>(1 + i % 6));
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::ListJobsResponse resp;
    return training->ListJobs(&ctx, r, &resp);
  };
  EXPECT_TRUE(RefusedNaming(list(7), {"states", "7 entries", "cap of 6"}));
  EXPECT_TRUE(list(6).ok()) << list(6).error_message();

  // KServe ModelInfer: parameters, inputs, outputs, raw_input_contents, inputs[i].shape / .parameters /
  // .contents, outputs[i].parameters.
  auto infer = [&](const std::function<void(inference::ModelInferRequest&)>& mutate) {
    inference::ModelInferRequest r;
    r.set_model_name("prototype");
    auto* in = r.add_inputs();
    in->set_name("text");
    in->set_datatype("BYTES");
    in->add_shape(1);
    in->mutable_contents()->add_bytes_contents("hello");
    mutate(r);
    grpc::ClientContext ctx;
    Prepare(&ctx);
    inference::ModelInferResponse resp;
    return oip->ModelInfer(&ctx, r, &resp);
  };
  auto params = [](google::protobuf::Map<std::string, inference::InferParameter>* m, int n) {
    for (int i = 0; i < n; ++i) (*m)["p" + std::to_string(i)].set_bool_param(true);
  };
  auto texts_input = [](inference::ModelInferRequest& r, int n) {
    auto* in = r.mutable_inputs(0);
    in->set_shape(0, n);
    in->mutable_contents()->clear_bytes_contents();
    for (int i = 0; i < n; ++i) in->mutable_contents()->add_bytes_contents("t" + std::to_string(i));
  };
  auto raw_input = [](inference::ModelInferRequest& r, int n) {
    auto* in = r.mutable_inputs(0);
    in->set_shape(0, n);
    in->mutable_contents()->clear_bytes_contents();
    std::string raw;
    for (int i = 0; i < n; ++i) raw += std::string("\x02\x00\x00\x00", 4) + "t" + std::to_string(i);
    r.add_raw_input_contents(raw);
  };
  struct InferCap {
    std::function<void(inference::ModelInferRequest&, int)> fill;
    int cap;
    std::vector<std::string> parts;
  };
  const std::vector<InferCap> caps = {
      {[&](auto& r, int n) { params(r.mutable_parameters(), n); }, 16, {"parameters", "17 entries", "cap of 16"}},
      {[](auto& r, int n) {
         for (int i = 1; i < n; ++i) r.add_inputs()->set_name("x" + std::to_string(i));
       },
       8,
       {"inputs", "9 tensors", "cap of 8"}},
      {[](auto& r, int n) {
         static const char* names[] = {"value", "value_unrefined", "knn_value", "out_of_distribution",
                                       "population_consistency", "agreement_consistency", "prototype_ids",
                                       "prototype_texts", "prototype_labels", "prototype_weights"};
         for (int i = 0; i < n; ++i) r.add_outputs()->set_name(names[i % 10]);
       },
       10,
       {"outputs", "11 tensors", "cap of 10"}},
      {[&](auto& r, int n) {
         raw_input(r, 1);
         for (int i = 1; i < n; ++i) r.add_raw_input_contents(std::string("\x02\x00\x00\x00zz", 6));
       },
       1,
       {"raw_input_contents", "2 entries", "cap of 1"}},
      {[](auto& r, int n) {
         for (int i = 1; i < n; ++i) r.mutable_inputs(0)->add_shape(1);
       },
       8,
       {"inputs[0].shape", "9 dimensions", "cap of 8"}},
      {[&](auto& r, int n) { params(r.mutable_inputs(0)->mutable_parameters(), n); },
       16,
       {"inputs[0].parameters", "17 entries", "cap of 16"}},
      {[&](auto& r, int n) { params(r.add_outputs()->mutable_parameters(), n); },
       16,
       {"outputs[0].parameters", "17 entries", "cap of 16"}},
      {[&](auto& r, int n) { texts_input(r, n); }, 3, {"inputs[0].contents", "4 elements", "max_predict_texts=3"}},
      {[&](auto& r, int n) { raw_input(r, n); }, 3, {"raw_input_contents[0]", "max_predict_texts=3"}},
  };
  for (size_t i = 0; i < caps.size(); ++i) {
    const InferCap& c = caps[i];
    EXPECT_TRUE(RefusedNaming(infer([&](auto& r) { c.fill(r, c.cap + 1); }), c.parts)) << "case " << i;
    const grpc::Status at = infer([&](auto& r) { c.fill(r, c.cap); });
    EXPECT_FALSE(RefusedByCap(at)) << "case " << i << ": " << at.error_message();
  }
  EXPECT_TRUE(f->Alive());
}

}  // namespace
}  // namespace frost::e2e
