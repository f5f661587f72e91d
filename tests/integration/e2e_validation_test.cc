// End-to-end tests of frostd's request validation (harness: tests/testing/e2e_harness.h): every bad
// request is INVALID_ARGUMENT naming the field, before any model work, and requests exactly at the limits
// are accepted.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

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
  // Field names: the edge checks use proto paths ("sampling.logprobs", "kv.codec"), the engine's checks the
  // bare field ("temperature", "prompt_ids[1]"); the parts below match either spelling.
  const std::vector<BadRequest> cases = {
      {"no prompt", [](v1::GenerateRequest& r) { r.clear_prompt(); }, {"prompt", "text or token_ids"}},
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

}  // namespace
}  // namespace frost::e2e
