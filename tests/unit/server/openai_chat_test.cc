// The chat side of the OpenAI bodies (server/openai_chat.h): messages with tool calls and tool results as the
// template sees them, tools / tool_choice / parallel_tool_calls, and the constraint a forced tool call runs
// under — compiled by the real constraint engine and matched against documents a client would validate.
#include "server/openai_chat.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "core/constrain/constraint.h"
#include "core/constrain/grammar.h"
#include "core/model/chat_prompt.h"
#include "server/openai_api.h"

namespace frost::server::openai {
namespace {

using ojson = nlohmann::ordered_json;

ParsedRequest ok(const std::string& body) {
  auto r = parse_request(Endpoint::kChat, body, LimitsSection());
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << e->message;
    return {};
  }
  return std::get<ParsedRequest>(r);
}

ApiError err(const std::string& body) {
  auto r = parse_request(Endpoint::kChat, body, LimitsSection());
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << body << " was accepted";
  return {};
}

const char* kWeather = R"({"type":"function","function":{"name":"get_weather","description":"d",
    "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":20},"unit":{"enum":["c","f"]}},
    "required":["city","unit"]}}})";
const char* kTime = R"({"type":"function","function":{"name":"get_time","parameters":{"type":"object",
    "properties":{"zone":{"$ref":"#/$defs/zone"}},"required":["zone"],"$defs":{"zone":{"enum":["utc","cet"]}}}}})";

std::string chat(const std::string& extra) {
  return std::string(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[)") + kWeather +
         "," + kTime + "]" + extra + "}";
}

// Whether `text` is a complete output of the compiled constraint.
bool admits(const ConstraintRequest& c, const std::string& text) {
  constrain::ConstraintSpec spec;
  spec.kind = static_cast<constrain::ConstraintSpec::Kind>(static_cast<int>(c.kind));
  spec.text = c.text;
  auto compiled = constrain::compile_constraint(spec);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return false;
  constrain::Recognizer r((*compiled)->grammar_ptr());
  return r.advance_bytes(text) && r.accepting();
}

TEST(OpenAiChat, ToolsAndChoicesParse) {
  ParsedRequest p = ok(chat(""));
  ASSERT_EQ(p.tools.names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_EQ(p.tools.choice, ToolChoice::kAuto);  // auto is the default with tools
  EXPECT_TRUE(p.tools.parallel);
  EXPECT_EQ(p.constraint.kind, ConstraintRequest::Kind::kNone);
  // Member order is the client's (templates print tools with tojson).
  EXPECT_EQ(p.tools.tools[0]["function"].dump().substr(0, 30), R"({"name":"get_weather","descrip)");
  EXPECT_EQ(ok(chat(R"(,"tool_choice":"none")")).tools.choice, ToolChoice::kNone);
  ParsedRequest named = ok(chat(R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})"));
  EXPECT_EQ(named.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.tools.named, 1);
  EXPECT_EQ(named.constraint.field, "tools[1].function.parameters");
  EXPECT_EQ(forced_name(named.tools), "get_time");
  EXPECT_EQ(output_format(named.tools, ToolCallFormat::kHermes), ToolCallFormat::kArguments);
  ParsedRequest req = ok(chat(R"(,"tool_choice":"required","parallel_tool_calls":false)"));
  EXPECT_EQ(req.constraint.kind, ConstraintRequest::Kind::kJsonSchema);
  EXPECT_FALSE(req.tools.parallel);
  EXPECT_EQ(output_format(req.tools, ToolCallFormat::kHermes), ToolCallFormat::kCallList);
  // No tools: nothing is parsed whatever tool_choice says.
  EXPECT_EQ(
      ok(R"({"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"auto"})").tools.choice,
      ToolChoice::kNone);
}

TEST(OpenAiChat, ToolErrorsNameTheField) {
  EXPECT_EQ(err(chat(R"(,"tool_choice":"sometimes")")).param, "tool_choice");
  EXPECT_EQ(err(chat(R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})")).param,
            "tool_choice");
  EXPECT_EQ(err(chat(R"(,"parallel_tool_calls":"yes")")).param, "parallel_tool_calls");
  EXPECT_EQ(err(chat(R"(,"tool_choice":"required","response_format":{"type":"json_object"})")).param,
            "tool_choice");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"})").param,
            "tool_choice");
  EXPECT_EQ(
      err(R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"retrieval"}]})").param,
      "tools[0].type");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                    "tools":[{"type":"function","function":{"name":"a b"}}]})")
                .param,
            "tools[0].function.name");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",
                    "function":{"name":"a"}},{"type":"function","function":{"name":"a"}}]})")
                .param,
            "tools[1].function.name");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                    "tools":[{"type":"function","function":{"name":"a","parameters":[]}}]})")
                .param,
            "tools[0].function.parameters");
}

TEST(OpenAiChat, ToolCallsAndResultsInMessages) {
  ParsedRequest p = ok(R"({"model":"m","messages":[{"role":"user","content":"weather?"},
      {"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"unit\":\"c\",\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"21"}]}]})");
  ASSERT_EQ(p.messages.size(), 3u);
  const ojson& call = p.messages[1]["tool_calls"][0];
  // The arguments text became an object, in the client's member order (templates write `arguments | tojson`).
  EXPECT_EQ(call["function"]["arguments"].dump(), R"({"unit":"c","city":"Paris"})");
  EXPECT_EQ(p.messages[1]["content"],
            "");  // null content renders as "" (templates treat content as a string)
  EXPECT_EQ(p.messages[2]["content"], "21");
  EXPECT_EQ(p.messages[2]["tool_call_id"], "call_1");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"type":"function",
                    "function":{"name":"f","arguments":"not json"}}]}]})")
                .param,
            "messages[0].tool_calls[0].function.arguments");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"tool","content":"x"}]})").param,
            "messages[0].tool_call_id");
  EXPECT_EQ(err(R"({"model":"m","messages":[{"role":"user","content":"x","audio":{"id":"a"}}]})").param,
            "messages[0].audio");
}

// The forced choices' constraints admit exactly the calls a client validates.
TEST(OpenAiChat, ForcedChoicesConstrainToTheSchemas) {
  const ParsedRequest named =
      ok(chat(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_TRUE(admits(named.constraint, R"({"city": "Paris", "unit": "c"})"));
  EXPECT_FALSE(admits(named.constraint, R"({"city": "Paris", "unit": "k"})"));
  EXPECT_FALSE(admits(named.constraint, R"({"city": "Paris"})"));
  // A function without parameters takes none: its arguments are {}.
  const ParsedRequest bare = ok(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "tools":[{"type":"function","function":{"name":"ping"}}],"tool_choice":{"type":"function","function":{"name":"ping"}}})");
  EXPECT_TRUE(admits(bare.constraint, "{}"));
  EXPECT_FALSE(admits(bare.constraint, R"({"a": 1})"));
  const ParsedRequest req = ok(chat(R"(,"tool_choice":"required")"));
  EXPECT_TRUE(
      admits(req.constraint, R"([{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "f"}}])"));
  // get_time's $ref, rebased into the array schema, still resolves.
  EXPECT_TRUE(admits(req.constraint,
                     R"([{"name": "get_time", "parameters": {"zone": "utc"}}, )"
                     R"({"name": "get_weather", "parameters": {"city": "x", "unit": "c"}}])"));
  EXPECT_FALSE(admits(req.constraint, R"([{"name": "get_time", "parameters": {"zone": "pst"}}])"));
  EXPECT_FALSE(admits(req.constraint, R"([{"name": "get_weather", "parameters": {"zone": "utc"}}])"));
  EXPECT_FALSE(admits(req.constraint, "[]"));
  const ParsedRequest one = ok(chat(R"(,"tool_choice":"required","parallel_tool_calls":false)"));
  EXPECT_FALSE(admits(one.constraint, R"([{"name": "get_time", "parameters": {"zone": "utc"}}, )"
                                      R"({"name": "get_time", "parameters": {"zone": "cet"}}])"));
  // What the output parser makes of an admitted output: the calls with compact arguments.
  ToolCallOutput out =
      parse_tool_calls(ToolCallFormat::kCallList, R"([{"name": "get_time", "parameters": {"zone": "utc"}}])");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_time");
  EXPECT_EQ(out.calls[0].arguments, R"({"zone":"utc"})");
}

TEST(OpenAiChat, ToolCallIdsAndJson) {
  EXPECT_EQ(new_tool_call_id(ToolCallFormat::kHermes).size(), 29u);
  EXPECT_EQ(new_tool_call_id(ToolCallFormat::kHermes).substr(0, 5), "call_");
  EXPECT_EQ(new_tool_call_id(ToolCallFormat::kMistral).size(), 9u);  // Mistral's templates refuse other ids
  const nlohmann::json j = tool_calls_json({{"f", R"({"a":1})"}}, {"call_x"}, true, 2);
  EXPECT_EQ(j[0]["index"], 2);
  EXPECT_EQ(j[0]["function"]["arguments"], R"({"a":1})");
}

// frost's default template renders tools, calls and results, and its calls are what the hermes parser reads.
TEST(OpenAiChat, DefaultTemplateRendersTheToolLoop) {
  ParsedRequest p = ok(R"({"model":"m","tools":[)" + std::string(kWeather) + R"(],"messages":[
      {"role":"system","content":"Be brief."},{"role":"user","content":"weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"21"}]})");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(kDefaultChatTemplate);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(detect_tool_call_format(kDefaultChatTemplate), ToolCallFormat::kHermes);
  ojson vars{{"messages", p.messages}, {"tools", p.tools.tools}, {"add_generation_prompt", true}};
  absl::StatusOr<std::string> text = t->render_json(vars.dump());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("<|im_start|>system\nBe brief.\n\nFunctions you may call:"), std::string::npos)
      << *text;
  EXPECT_NE(text->find(R"({"type": "function", "function": {"name": "get_weather")"), std::string::npos)
      << *text;
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
      "\"c\"}}\n</tool_call>";
  EXPECT_NE(text->find("<|im_start|>assistant\n" + call + "<|im_end|>"), std::string::npos) << *text;
  EXPECT_NE(text->find(
                "<|im_start|>user\n<tool_response>\n21\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos)
      << *text;
  ToolCallOutput out = parse_tool_calls(ToolCallFormat::kHermes, call);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris","unit":"c"})");
}

}  // namespace
}  // namespace frost::server::openai
