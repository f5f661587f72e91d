// The OpenAI API's bodies (server/openai_api.h): what a client sends maps to the engine's request, and every
// bad body gets a 4xx naming the field.
#include "server/openai_api.h"

#include <grpcpp/support/status.h>
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "core/common/field_error.h"
#include "server/openai_render.h"

namespace frost::server::openai {
namespace {

using json = nlohmann::json;

ParsedRequest ok(Endpoint ep, const std::string& body) {
  auto r = parse_request(ep, body, LimitsSection());
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << e->message;
    return {};
  }
  return std::get<ParsedRequest>(r);
}

ApiError err(Endpoint ep, const std::string& body) {
  auto r = parse_request(ep, body, LimitsSection());
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << body << " was accepted";
  return {};
}

TEST(OpenAiApi, CompletionsMapOntoTheEngineRequest) {
  ParsedRequest p = ok(Endpoint::kCompletions,
                       R"({"model":"m","prompt":"Once","max_tokens":7,"temperature":0.5,"top_p":0.9,"seed":42,
                           "stop":["\n","The end"],"logprobs":2,"presence_penalty":0.5,"frequency_penalty":-0.5,
                           "top_k":40,"min_p":0.05,"repetition_penalty":1.1,"ignore_eos":true,"n":2,"stream":true,
                           "stream_options":{"include_usage":true},"user":"u"})");
  EXPECT_EQ(p.model, "m");
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(p.prompts[0].text, "Once");
  EXPECT_EQ(p.params.max_new_tokens, 7);
  EXPECT_FLOAT_EQ(p.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.params.top_p, 0.9f);
  ASSERT_TRUE(p.params.seed.has_value());
  EXPECT_EQ(*p.params.seed, 42u);
  EXPECT_EQ(p.params.stop, (std::vector<std::string>{"\n", "The end"}));
  EXPECT_EQ(p.params.logprobs, 2);
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.params.top_k, 40);
  EXPECT_FLOAT_EQ(p.params.min_p, 0.05f);
  EXPECT_TRUE(p.params.ignore_eos);
  EXPECT_EQ(p.n, 2);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
}

TEST(OpenAiApi, DefaultsAreOpenAisAndOffMeansOff) {
  ParsedRequest c = ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x"})");
  EXPECT_EQ(c.params.max_new_tokens, 16);  // OpenAI's completions default
  EXPECT_FLOAT_EQ(c.params.temperature, 1.0f);
  EXPECT_FALSE(c.params.seed.has_value());
  EXPECT_EQ(c.params.logprobs, -1);
  EXPECT_FALSE(c.stream);
  ParsedRequest chat = ok(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"hi"}],
                                               "temperature":null,"max_completion_tokens":9})");
  EXPECT_EQ(chat.params.max_new_tokens, 9);
  EXPECT_TRUE(chat.max_tokens_set);
  ASSERT_EQ(chat.messages.size(), 1u);
  EXPECT_EQ(chat.messages[0]["role"], "user");
  EXPECT_EQ(chat.messages[0]["content"], "hi");
  // Chat without max_tokens: the context's remainder, set at submit (not 256).
  EXPECT_FALSE(ok(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"hi"}]})").max_tokens_set);
  LimitsSection lim;
  EXPECT_EQ(default_chat_max_tokens(100, 2048, lim), std::min<int32_t>(1948, lim.max_new_tokens));
  EXPECT_EQ(default_chat_max_tokens(100, 612, lim), 512);
}

// generation_config.json's sampling (sampling_defaults) is where a request starts; a field the body sets wins,
// and an explicit null keeps the checkpoint's value (unset, as vLLM reads it).
TEST(OpenAiApi, CheckpointSamplingDefaultsFillWhatTheBodyLeavesUnset) {
  GenerationDefaults g;
  g.temperature = 0.6f;
  g.top_p = 0.9f;
  g.top_k = 20;
  const SamplingParams d = sampling_defaults(g);
  auto parsed = [&](const std::string& body) {
    auto r = parse_request(Endpoint::kCompletions, body, LimitsSection(), d);
    EXPECT_TRUE(std::holds_alternative<ParsedRequest>(r));
    return std::get<ParsedRequest>(r);
  };
  ParsedRequest unset = parsed(R"({"model":"m","prompt":"x","temperature":null})");
  EXPECT_FLOAT_EQ(unset.params.temperature, 0.6f);
  EXPECT_FLOAT_EQ(unset.params.top_p, 0.9f);
  EXPECT_EQ(unset.params.top_k, 20);
  ParsedRequest set = parsed(R"({"model":"m","prompt":"x","temperature":0,"top_p":1,"top_k":-1})");
  EXPECT_FLOAT_EQ(set.params.temperature, 0.f);
  EXPECT_FLOAT_EQ(set.params.top_p, 1.f);
  EXPECT_EQ(set.params.top_k, 0);
}

TEST(OpenAiApi, PromptFormsAndChatContentParts) {
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":["a b"]})").prompts[0].text, "a b");
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":[1,2,3]})").prompts[0].ids,
            (std::vector<int32_t>{1, 2, 3}));
  // Batches: strings or token-id lists, choices prompt-major.
  ParsedRequest b = ok(Endpoint::kCompletions, R"({"model":"m","prompt":["a",[5,6],"c"],"n":2})");
  ASSERT_EQ(b.prompts.size(), 3u);
  EXPECT_EQ(b.prompts[1].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(b.prompts[2].text, "c");
  EXPECT_EQ(err(Endpoint::kCompletions, R"({"model":"m","prompt":["a",[]]})").param, "prompt");
  EXPECT_EQ(err(Endpoint::kCompletions, R"({"model":"m","prompt":["a",{}]})").param, "prompt");
  ParsedRequest p = ok(Endpoint::kChat, R"({"model":"m","messages":[{"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"logprobs":true,"top_logprobs":3})");
  EXPECT_EQ(p.messages[0]["role"], "system");
  EXPECT_EQ(p.messages[1]["content"], "ab");
  EXPECT_EQ(p.params.logprobs, 3);
}

TEST(OpenAiApi, ResponseFormatAndGuidedFieldsBecomeOneConstraint) {
  ParsedRequest a = ok(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,
      "schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}})");
  EXPECT_EQ(a.constraint.kind, ConstraintRequest::Kind::kJsonSchema);
  EXPECT_EQ(json::parse(a.constraint.text)["properties"]["a"]["type"], "integer");
  EXPECT_EQ(a.constraint.field, "response_format.json_schema.schema");
  // The schema's text keeps the body's key order (properties are generated in that order).
  ParsedRequest ordered = ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x",
      "guided_json":{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}}})");
  EXPECT_LT(ordered.constraint.text.find("zeta"), ordered.constraint.text.find("alpha")) << ordered.constraint.text;
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x","response_format":{"type":"json_object"}})")
                .constraint.kind,
            ConstraintRequest::Kind::kJsonObject);
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x","response_format":{"type":"text"}})").constraint.kind,
            ConstraintRequest::Kind::kNone);
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x","guided_regex":"[0-9]+"})").constraint.kind,
            ConstraintRequest::Kind::kRegex);
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x","guided_grammar":"root ::= \"a\""})").constraint.kind,
            ConstraintRequest::Kind::kGrammar);
  ApiError two = err(Endpoint::kCompletions,
                     R"({"model":"m","prompt":"x","guided_regex":"a","response_format":{"type":"json_object"}})");
  EXPECT_EQ(two.http, 400);
  EXPECT_NE(two.message.find("only one of"), std::string::npos) << two.message;
}

TEST(OpenAiApi, BadBodiesGetA4xxNamingTheField) {
  struct Case {
    Endpoint ep;
    const char* body;
    const char* param;
    int http;
  };
  const Case cases[] = {
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x",)", "", 400},  // malformed JSON
      {Endpoint::kCompletions, R"([1,2])", "", 400},
      {Endpoint::kCompletions, R"({"prompt":"x"})", "model", 400},
      {Endpoint::kCompletions, R"({"model":"m"})", "prompt", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":""})", "prompt", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":7})", "prompt", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","max_tokens":"ten"})", "max_tokens", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","max_tokens":0})", "max_tokens", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","max_tokens":1.5})", "max_tokens", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","temperature":3})", "temperature", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","n":0})", "n", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","n":1000})", "n", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stop":5})", "stop", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","logprobs":99})", "logprobs", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","echo":true})", "echo", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","frobnicate":1})", "frobnicate", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})",
       "stream_options", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","response_format":{"type":"yaml"}})",
       "response_format.type", 400},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x","logit_bias":{"5":1}})", "logit_bias", 400},
      {Endpoint::kChat, R"({"model":"m"})", "messages", 400},
      {Endpoint::kChat, R"({"model":"m","messages":[]})", "messages", 400},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", "messages[0].role", 400},
      {Endpoint::kChat, R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role", 400},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x","tool_calls":[]}]})",
       "messages[0].tool_calls", 400},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content[0].type", 400},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
       "top_logprobs", 400},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"prompt":"x"})", "prompt", 400},
  };
  for (const Case& c : cases) {
    ApiError e = err(c.ep, c.body);
    EXPECT_EQ(e.http, c.http) << c.body << " -> " << e.message;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty()) << c.body;
    const json body = json::parse(error_body(e));
    EXPECT_EQ(body["error"]["message"], e.message);
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  }
}

TEST(OpenAiApi, InvalidUtf8AndHugePromptsAreRefused) {
  ApiError bad_utf8 = err(Endpoint::kCompletions, std::string("{\"model\":\"m\",\"prompt\":\"a\xff\"}"));
  EXPECT_EQ(bad_utf8.http, 400);
  EXPECT_NE(bad_utf8.message.find("not valid JSON"), std::string::npos) << bad_utf8.message;
  LimitsSection small;
  small.max_prompt_bytes = 8;
  auto r = parse_request(Endpoint::kCompletions, R"({"model":"m","prompt":"0123456789"})", small);
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_EQ(std::get<ApiError>(r).http, 413);
  EXPECT_EQ(std::get<ApiError>(r).param, "prompt");
  // Whatever bytes arrive, the answer is an error object, never a crash.
  for (const char* junk : {"", "null", "\"s\"", "{", "{\"model\":{}}", "{\"model\":\"m\",\"prompt\":[[]]}",
                           "{\"model\":\"m\",\"prompt\":[1e99]}", "{\"model\":\"m\",\"prompt\":\"x\",\"seed\":-1e300}",
                           "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":1e400}"}) {
    auto j = parse_request(Endpoint::kCompletions, junk, LimitsSection());
    EXPECT_TRUE(std::holds_alternative<ApiError>(j)) << junk;
  }
}

TEST(OpenAiApi, EngineStatusesBecomeTheHttpCodesClientsExpect) {
  const std::pair<absl::Status, int> cases[] = {
      {absl::InvalidArgumentError("top_p must be in (0, 1], got 2"), 400},
      {absl::FailedPreconditionError("kv.repair: ON but none active"), 400},
      {absl::UnauthenticatedError("no token"), 401},
      {absl::PermissionDeniedError("admin only"), 403},
      {absl::NotFoundError("no such model"), 404},
      {absl::ResourceExhaustedError("server busy: 2 running and 3 waiting"), 429},
      {absl::UnavailableError("server is draining"), 503},
      {absl::DeadlineExceededError("late"), 504},
      {absl::InternalError("boom"), 500},
  };
  for (const auto& [st, http] : cases) {
    const ApiError e = error_from_status(st, "top_p");
    EXPECT_EQ(e.http, http) << st;
    EXPECT_EQ(e.message, std::string(st.message()));
    EXPECT_EQ(e.param, "top_p");
  }
  EXPECT_EQ(grpc_code_for_http(429), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(grpc_code_for_http(413), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  // The engine's field comes as data (core/common/field_error.h), never read out of the message.
  const absl::Status max = invalid_field("max_new_tokens", "must be in [1, 4096], got 0");
  ApiError e = engine_error(Endpoint::kChat, max, "");
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.message, "max_tokens: must be in [1, 4096], got 0");
  e = engine_error(Endpoint::kCompletions, invalid_field("top_p", "must be in (0, 1], got 2"), "");
  EXPECT_EQ(e.param, "top_p");
  EXPECT_EQ(e.message, "top_p: must be in (0, 1], got 2");
  e = engine_error(Endpoint::kCompletions, invalid_field("stop", "must not be empty", "[1]"), "");
  EXPECT_EQ(e.param, "stop");
  EXPECT_EQ(e.message, "stop[1]: must not be empty");
  e = engine_error(Endpoint::kChat,
                   prefix_field(absl::InvalidArgumentError("bad schema at /x"), "constraint"),
                   "response_format.json_schema.schema");
  EXPECT_EQ(e.param, "response_format.json_schema.schema");
  EXPECT_EQ(e.message, "response_format.json_schema.schema: bad schema at /x");
  e = engine_error(Endpoint::kChat, invalid_field("prompt", "is 9 tokens, over limits.max_prompt_tokens = 8"),
                   "");
  EXPECT_EQ(e.param, "messages");
  // A message that merely starts like a field name is not taken for one.
  e = engine_error(Endpoint::kChat, absl::InvalidArgumentError("top_p must be in (0, 1], got 2"), "");
  EXPECT_EQ(e.param, "");
}

// frost's extension object "speculative" on both endpoints: carried to the engine request as given (the
// engine clamps num_tokens to the server's k), a 400 naming the field for what no server could take.
TEST(OpenAiApi, SpeculativeExtension) {
  ParsedRequest none = ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x"})");
  EXPECT_EQ(none.spec_method, SpecMethod::kServer);
  EXPECT_EQ(none.spec_num_tokens, 0);
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x","speculative":null})").spec_method,
            SpecMethod::kServer);
  ParsedRequest c = ok(Endpoint::kCompletions,
                       R"({"model":"m","prompt":"x","speculative":{"method":"ngram","num_tokens":6}})");
  EXPECT_EQ(c.spec_method, SpecMethod::kNgram);
  EXPECT_EQ(c.spec_num_tokens, 6);
  ParsedRequest chat = ok(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"hi"}],
                                             "speculative":{"method":"suffix"}})");
  EXPECT_EQ(chat.spec_method, SpecMethod::kSuffix);
  EXPECT_EQ(chat.spec_num_tokens, 0);  // the server's k
  EXPECT_EQ(ok(Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"hi"}],
                                  "speculative":{"method":"off","num_tokens":2.0}})")
                .spec_method,
            SpecMethod::kOff);
  ParsedRequest k_only =
      ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x","speculative":{"num_tokens":99}})");
  EXPECT_EQ(k_only.spec_method, SpecMethod::kServer);
  EXPECT_EQ(k_only.spec_num_tokens, 99);

  struct Case {
    std::string spec, param, needle;
  };
  const std::vector<Case> cases = {
      {R"("ngram")", "speculative", "speculative: expected an object, got a string"},
      {R"({"method":"eagle"})", "speculative.method",
       "speculative.method: unknown value \"eagle\" (expected off|ngram|suffix)"},
      {R"({"method":3})", "speculative.method", "speculative.method: expected a string, got an integer"},
      {R"({"num_tokens":-1})", "speculative.num_tokens", "speculative.num_tokens: must be >= 0, got -1"},
      {R"({"num_tokens":1.5})", "speculative.num_tokens",
       "speculative.num_tokens: expected an integer, got 1.5"},
      {R"({"num_tokens":"4"})", "speculative.num_tokens",
       "speculative.num_tokens: expected an integer, got a string"},
      {R"({"num_tokens":4294967296})", "speculative.num_tokens", "speculative.num_tokens: out of range"},
      {R"({"k":4})", "speculative.k", "speculative.k: unknown field"},
  };
  for (const Case& t : cases) {
    for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kChat}) {
      const std::string head = ep == Endpoint::kCompletions
                                   ? R"({"model":"m","prompt":"x",)"
                                   : R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
      const ApiError e = err(ep, head + R"("speculative":)" + t.spec + "}");
      EXPECT_EQ(e.http, 400) << t.spec;
      EXPECT_EQ(e.param, t.param) << t.spec;
      EXPECT_NE(e.message.find(t.needle), std::string::npos) << t.spec << " -> " << e.message;
    }
  }
}

// usage.completion_tokens_details (OpenAI's names for predicted tokens): only when a choice speculated.
TEST(OpenAiApi, UsageReportsAcceptedAndRejectedPredictionTokens) {
  std::vector<ChoiceState> choices(2);
  for (ChoiceState& c : choices) {
    GenerationResult r;
    r.n_prompt = 4;
    r.n_completion = 10;
    c.result = r;
  }
  EXPECT_FALSE(usage_of(choices).contains("completion_tokens_details")) << usage_of(choices);
  choices[0].result->n_draft_tokens = 8;
  choices[0].result->n_accepted_tokens = 5;
  choices[1].result->n_draft_tokens = 4;
  choices[1].result->n_accepted_tokens = 1;
  const json u = usage_of(choices);
  EXPECT_EQ(u["completion_tokens"], 20);
  EXPECT_EQ(u["completion_tokens_details"]["accepted_prediction_tokens"], 6);
  EXPECT_EQ(u["completion_tokens_details"]["rejected_prediction_tokens"], 6);
  const ResponseMeta meta{"chatcmpl-1", 1700000000, "m"};
  EXPECT_EQ(
      full_response(Endpoint::kChat, meta, choices, false, [](int32_t) { return std::string(); })["usage"],
      u);
  EXPECT_EQ(usage_chunk(Endpoint::kCompletions, meta, choices)["usage"], u);
}

TEST(OpenAiApi, ResponsesHaveOpenAisShape) {
  ResponseMeta meta{"cmpl-1", 1700000000, "stories260K"};
  std::vector<ChoiceState> choices(1);
  choices[0].text = "Hello";
  GenerationResult r;
  r.finish_reason = FinishReason::kLength;
  r.n_prompt = 4;
  r.n_completion = 2;
  choices[0].result = r;
  TokenEvent e1;
  e1.id = 5;
  e1.text = "Hel";
  e1.logprob = -0.5f;
  e1.top_logprobs = {{5, -0.5f}, {6, -1.5f}};
  TokenEvent e2 = e1;
  e2.id = 6;
  e2.text = "lo";
  choices[0].events = {e1, e2};
  auto text = [](int32_t id) { return id == 5 ? std::string("Hel") : std::string("lo"); };
  json c = full_response(Endpoint::kCompletions, meta, choices, true, text);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "Hello");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"], json({"Hel", "lo"}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], json({0, 3}));
  EXPECT_EQ(c["usage"]["total_tokens"], 6);
  json chat = full_response(Endpoint::kChat, meta, choices, true, text);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][1]["top_logprobs"][1]["token"], "lo");
  EXPECT_EQ(chat["choices"][0]["logprobs"]["content"][0]["bytes"], json({72, 101, 108}));
  json first = stream_chunk(Endpoint::kChat, meta, 0, {e1}, true, std::nullopt, false, text);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  json last = stream_chunk(Endpoint::kChat, meta, 0, {}, false, FinishReason::kStop, false, text);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  json usage = usage_chunk(Endpoint::kChat, meta, choices);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(utf8_for_json("a\xe2\x82"), "a\xEF\xBF\xBD");        // a truncated character: one U+FFFD
  EXPECT_EQ(utf8_for_json("a\xff\xfe b"), "a\xEF\xBF\xBD\xEF\xBF\xBD b");  // two invalid bytes: two
}

}  // namespace
}  // namespace frost::server::openai
