// The OpenAI body's sampling fields (server/openai_sampling.h): sampling_params_table()'s rows read from the
// body, OpenAI's differences (other names, narrower ranges, "off" values) as declared data, and the same
// values as the gRPC codec reads from the proto (server/generation_codec.h).
#include "server/openai_sampling.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <variant>

#include "core/common/config_fields.h"
#include "server/generation_codec.h"

namespace frost::server::openai {
namespace {

using json = nlohmann::json;

std::variant<ParsedRequest, ApiError> parse(Endpoint ep, json body) {
  body["model"] = "m";
  if (ep == Endpoint::kChat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
  } else {
    body["prompt"] = "x";
  }
  return parse_request(ep, body.dump(), LimitsSection());
}

SamplingParams accepted(Endpoint ep, const json& body) {
  auto r = parse(ep, body);
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << e->message;
    return {};
  }
  return std::get<ParsedRequest>(r).params;
}

ApiError refused(Endpoint ep, const json& body) {
  auto r = parse(ep, body);
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << body << " was accepted";
  return {};
}

// A value in range and off its default for every plain row (logprobs: the endpoints' own fields).
SamplingParams probe() {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 3;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = -0.25f;
  p.seed = 42;
  p.max_new_tokens = 9;
  p.ignore_eos = true;
  return p;
}

// The body and the proto carry the same rows to the same SamplingParams: the probe's rows, written by the
// table (to_json), sent as an OpenAI body and as a GenerateRequest set through reflection, arrive equal.
// A row added to the table without a body key or a proto field fails here.
TEST(OpenAiSampling, TheBodyAndTheProtoReadTheSameRowsToTheSameValues) {
  const ConfigTable<SamplingParams>& table = sampling_params_table();
  const SamplingParams want = probe();
  json body = table.to_json<json>(want);
  for (const std::string& row : sampling_rows_by_hand()) body.erase(row);
  body["max_tokens"] = body["max_new_tokens"];  // OpenAI's name (body_fields())
  body.erase("max_new_tokens");
  for (Endpoint ep : {Endpoint::kCompletions, Endpoint::kChat}) {
    const SamplingParams got = accepted(ep, body);
    json got_rows = table.to_json<json>(got), want_rows = table.to_json<json>(want);
    for (const std::string& row : sampling_rows_by_hand()) got_rows.erase(row), want_rows.erase(row);
    EXPECT_EQ(got_rows, want_rows);
    EXPECT_EQ(got.temperature, want.temperature);  // bit for bit, not only in the shortest text
    EXPECT_EQ(got.min_p, want.min_p);
  }
  v1::GenerateRequest req;
  req.set_text("x");
  v1::SamplingParams& s = *req.mutable_sampling();
  const google::protobuf::Reflection& r = *s.GetReflection();
  for (const ConfigField<SamplingParams>& row : table.fields()) {
    const google::protobuf::FieldDescriptor* fd = s.GetDescriptor()->FindFieldByName(row.name);
    ASSERT_NE(fd, nullptr) << row.name;
    const ConfigValue v = row.get(want);
    if (row.name == "logprobs") continue;  // -1 is not sent (the wire's range is [0, max])
    switch (fd->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_FLOAT:
        r.SetFloat(&s, fd, static_cast<float>(std::get<double>(v)));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
        r.SetInt32(&s, fd, static_cast<int32_t>(std::get<int64_t>(v)));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        r.SetUInt64(&s, fd, std::get<uint64_t>(v));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
        r.SetBool(&s, fd, std::get<bool>(v));
        break;
      default:
        ADD_FAILURE() << row.name << ": a proto type this test does not set";
    }
  }
  absl::StatusOr<GenerationRequest> g = to_generation_request(req, LimitsSection());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(table.to_json<json>(g->params), table.to_json<json>(want));
  EXPECT_EQ(g->params.temperature, want.temperature);
}

// OpenAI's differences, each as body_fields() declares it.
TEST(OpenAiSampling, OpenAisDifferencesAreTheDeclaredOnes) {
  // temperature stops at 2 in the body (not on gRPC or in the core).
  ApiError e = refused(Endpoint::kCompletions, {{"temperature", 2.5}});
  EXPECT_EQ(e.http, 400);
  EXPECT_EQ(e.param, "temperature");
  EXPECT_EQ(e.message, "temperature: must be in [0, 2], got 2.5");
  EXPECT_EQ(accepted(Endpoint::kCompletions, {{"temperature", 2}}).temperature, 2.0f);
  // max_tokens and chat's max_completion_tokens are max_new_tokens, bounded by limits.max_new_tokens.
  EXPECT_EQ(accepted(Endpoint::kCompletions, {{"max_tokens", 5.0}}).max_new_tokens, 5);
  EXPECT_EQ(accepted(Endpoint::kChat, {{"max_completion_tokens", 4096}}).max_new_tokens, 4096);
  e = refused(Endpoint::kChat, {{"max_completion_tokens", 4097}});
  EXPECT_EQ(e.param, "max_completion_tokens");
  EXPECT_EQ(e.message, "max_completion_tokens: must be in [1, 4096] (limits.max_new_tokens), got 4097");
  e = refused(Endpoint::kCompletions, {{"max_tokens", 0}});
  EXPECT_EQ(e.message, "max_tokens: must be in [1, 4096] (limits.max_new_tokens), got 0");
  EXPECT_EQ(refused(Endpoint::kCompletions, {{"max_completion_tokens", 5}}).param, "max_completion_tokens");
  EXPECT_EQ(refused(Endpoint::kCompletions, {{"max_new_tokens", 5}}).param, "max_new_tokens");  // not a key
  // top_k -1 is vLLM's off; any other negative is refused in the table's words.
  EXPECT_EQ(accepted(Endpoint::kCompletions, {{"top_k", -1}}).top_k, 0);
  EXPECT_EQ(refused(Endpoint::kCompletions, {{"top_k", -2}}).message, "top_k: must be >= 0, got -2");
  // seed: any int64, a negative one by its bits; beyond int64 out of range.
  EXPECT_EQ(accepted(Endpoint::kCompletions, {{"seed", -1}}).seed, UINT64_MAX);
  EXPECT_EQ(accepted(Endpoint::kCompletions, {{"seed", INT64_MAX}}).seed, uint64_t{INT64_MAX});
  e = refused(Endpoint::kCompletions, {{"seed", uint64_t{1} << 63}});
  EXPECT_EQ(e.param, "seed");
  EXPECT_EQ(e.message, "seed: out of range, got 9223372036854775808");
}

// The rows without a declared difference: the table's range and words, param = the body's key.
TEST(OpenAiSampling, PlainRowsAreRefusedInTheTablesWords) {
  const std::pair<json, std::string> cases[] = {
      {{{"top_p", 1.5}}, "top_p: must be in (0, 1], got 1.5"},
      {{{"min_p", -0.1}}, "min_p: must be in [0, 1], got -0.1"},
      {{{"repetition_penalty", 0}}, "repetition_penalty: must be > 0, got 0"},
      {{{"presence_penalty", 2.5}}, "presence_penalty: must be in [-2, 2], got 2.5"},
      {{{"frequency_penalty", -3}}, "frequency_penalty: must be in [-2, 2], got -3"},
      {{{"temperature", "hot"}}, "temperature: expected a finite number, got \"hot\""},
      {{{"top_k", 1.5}}, "top_k: expected an integer, got 1.5"},
      {{{"ignore_eos", 1}}, "ignore_eos: expected true or false, got 1"},
      {{{"max_tokens", "ten"}}, "max_tokens: expected an integer, got \"ten\""},
  };
  for (const auto& [body, message] : cases) {
    const ApiError e = refused(Endpoint::kCompletions, body);
    EXPECT_EQ(e.http, 400) << body;
    EXPECT_EQ(e.param, body.begin().key());
    EXPECT_EQ(e.message, message);
  }
  // null = not given: the defaults stay.
  const SamplingParams d = accepted(Endpoint::kChat, {{"top_p", nullptr}, {"seed", nullptr}});
  EXPECT_EQ(d.top_p, 1.0f);
  EXPECT_FALSE(d.seed.has_value());
}

}  // namespace
}  // namespace frost::server::openai
