// POST /v1/responses as a mapping (server/openai_responses.h): Responses bodies → the chat request they stand
// for (messages, tools, forced calls, text.format), the refusals of the stateful and unsupported fields with
// the Responses field names, and the output side — items, their order, streamed events and the response
// object — equal whatever the split of the generated text.
#include "server/openai_responses.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "server/openai_api.h"

namespace frost::server::openai {
namespace {

using ojson = nlohmann::ordered_json;

ResponsesRequest ok(const std::string& body) {
  auto r = parse_responses_request(body, LimitsSection());
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << body << " -> " << e->param << ": " << e->message;
    return {};
  }
  return std::get<ResponsesRequest>(std::move(r));
}

ApiError err(const std::string& body) {
  auto r = parse_responses_request(body, LimitsSection());
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << body << " was accepted";
  return {};
}

const char* kWeatherTool = R"({"type":"function","name":"get_weather","description":"d","strict":true,
    "parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},
    "required":["city","unit"]}})";

TEST(OpenAiResponses, StringInputAndInstructions) {
  ResponsesRequest r = ok(R"({"model":"m","input":"Tell me a story","instructions":"Be brief","temperature":0,
                              "max_output_tokens":20,"seed":7})");
  EXPECT_EQ(r.chat.endpoint, Endpoint::kChat);
  EXPECT_EQ(r.chat.model, "m");
  ASSERT_EQ(r.chat.messages.size(), 2u);
  EXPECT_EQ(r.chat.messages[0]["role"], "system");
  EXPECT_EQ(r.chat.messages[0]["content"], "Be brief");
  EXPECT_EQ(r.chat.messages[1]["role"], "user");
  EXPECT_EQ(r.chat.messages[1]["content"], "Tell me a story");
  EXPECT_EQ(r.chat.params.max_new_tokens, 20);
  EXPECT_TRUE(r.chat.max_tokens_set);
  EXPECT_EQ(r.chat.params.temperature, 0.0f);
  ASSERT_TRUE(r.chat.params.seed.has_value());
  EXPECT_EQ(*r.chat.params.seed, 7u);
  EXPECT_EQ(r.chat.n, 1);
  EXPECT_FALSE(r.chat.stream);
  EXPECT_EQ(r.echo["instructions"], "Be brief");
  EXPECT_EQ(r.echo["max_output_tokens"], 20);
  EXPECT_EQ(r.echo["temperature"], 0);
  EXPECT_EQ(r.echo["tool_choice"], "auto");
  EXPECT_EQ(r.echo["text"], (ojson{{"format", {{"type", "text"}}}}));
  EXPECT_EQ(r.echo["metadata"], ojson::object());
  EXPECT_EQ(r.chat.constraint.kind, ConstraintRequest::Kind::kNone);
  EXPECT_FALSE(r.chat.max_tokens_set && ok(R"({"model":"m","input":"x"})").chat.max_tokens_set);
}

TEST(OpenAiResponses, ItemsBecomeMessagesWithToolCalls) {
  ResponsesRequest r = ok(std::string(R"({"model":"m","tools":[)") + kWeatherTool + R"(],"input":[
      {"role":"developer","content":"sys"},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in "},
                                                 {"type":"input_text","text":"Paris?"}]},
      {"type":"message","id":"msg_1","status":"completed","role":"assistant",
       "content":[{"type":"output_text","text":"Let me look.","annotations":[]}]},
      {"type":"function_call","id":"fc_1","call_id":"call_a","name":"get_weather",
       "arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}","status":"completed"},
      {"type":"function_call","call_id":"call_b","name":"get_weather","arguments":"{\"city\":\"Rome\",\"unit\":\"c\"}"},
      {"type":"function_call_output","call_id":"call_a","output":"18C"},
      {"type":"function_call_output","call_id":"call_b","output":[{"type":"input_text","text":"21C"}]},
      {"role":"user","content":"thanks"}]})");
  const ojson& m = r.chat.messages;
  ASSERT_EQ(m.size(), 6u) << m.dump();
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[1]["content"], "Weather in Paris?");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Let me look.");
  ASSERT_EQ(m[2]["tool_calls"].size(), 2u);  // both calls join the assistant message before them
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "call_a");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");  // parsed for the template
  EXPECT_EQ(m[2]["tool_calls"][1]["id"], "call_b");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["tool_call_id"], "call_a");
  EXPECT_EQ(m[3]["content"], "18C");
  EXPECT_EQ(m[4]["content"], "21C");
  EXPECT_EQ(m[5]["content"], "thanks");
  EXPECT_EQ(r.chat.tools.names, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(r.chat.tools.choice, ToolChoice::kAuto);
  EXPECT_EQ(r.echo["tools"][0]["name"], "get_weather");  // echoed in the Responses (flat) shape

  // A call with no assistant message before it opens one (content null).
  ResponsesRequest c = ok(R"({"model":"m","input":[{"role":"user","content":"hi"},
      {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"done"}]})");
  ASSERT_EQ(c.chat.messages.size(), 3u);
  EXPECT_EQ(c.chat.messages[1]["content"], "");  // a turn of calls only: "" (null content renders as "")
  EXPECT_EQ(c.chat.messages[1]["tool_calls"].size(), 1u);
}

TEST(OpenAiResponses, ToolChoicesAndTextFormatBecomeConstraints) {
  const std::string tools = std::string(R"("tools":[)") + kWeatherTool + "]";
  ResponsesRequest req = ok(R"({"model":"m","input":"x",)" + tools + R"(,"tool_choice":"required",
                                "parallel_tool_calls":false})");
  EXPECT_EQ(req.chat.tools.choice, ToolChoice::kRequired);
  EXPECT_FALSE(req.chat.tools.parallel);
  EXPECT_EQ(req.chat.constraint.kind, ConstraintRequest::Kind::kJsonSchema);
  EXPECT_EQ(req.chat.constraint.field, "tools");
  EXPECT_EQ(req.echo["parallel_tool_calls"], false);

  ResponsesRequest named = ok(R"({"model":"m","input":"x",)" + tools +
                              R"(,"tool_choice":{"type":"function","name":"get_weather"}})");
  EXPECT_EQ(named.chat.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(named.chat.constraint.field, "tools[0].parameters");  // the Responses name, for engine errors
  EXPECT_EQ(named.echo["tool_choice"]["name"], "get_weather");

  ResponsesRequest schema = ok(R"({"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"p",
      "strict":true,"schema":{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}},
      "required":["zeta","alpha"]}}}})");
  EXPECT_EQ(schema.chat.constraint.kind, ConstraintRequest::Kind::kJsonSchema);
  EXPECT_EQ(schema.chat.constraint.field, "text.format.schema");
  EXPECT_LT(schema.chat.constraint.text.find("zeta"),
            schema.chat.constraint.text.find("alpha"));  // order kept
  EXPECT_EQ(schema.echo["text"]["format"]["name"], "p");

  EXPECT_EQ(ok(R"({"model":"m","input":"x","text":{"format":{"type":"json_object"}}})").chat.constraint.kind,
            ConstraintRequest::Kind::kJsonObject);
  EXPECT_EQ(ok(R"({"model":"m","input":"x","text":{"format":{"type":"text"},"verbosity":"low"}})")
                .chat.constraint.kind,
            ConstraintRequest::Kind::kNone);
  // A forced call is a constraint itself: text.format beside it is refused, in the Responses names.
  ApiError both = err(R"({"model":"m","input":"x",)" + tools +
                      R"(,"tool_choice":"required","text":{"format":{"type":"json_object"}}})");
  EXPECT_EQ(both.param, "tool_choice");
  EXPECT_NE(both.message.find("text.format"), std::string::npos) << both.message;
  EXPECT_EQ(both.message.find("response_format"), std::string::npos) << both.message;
}

TEST(OpenAiResponses, HarmlessFieldsAccepted) {
  ResponsesRequest r = ok(R"({"model":"m","input":"x","store":true,"metadata":{"k":"v"},"user":"u",
      "safety_identifier":"s","prompt_cache_key":"p","truncation":"disabled","service_tier":"auto",
      "reasoning":{"effort":null},"include":["reasoning.encrypted_content"],"previous_response_id":null,
      "conversation":null,"background":false,"top_logprobs":0,"max_tool_calls":null,"stream":true,
      "stream_options":{"include_obfuscation":false},"top_p":0.9,"parallel_tool_calls":true})");
  EXPECT_TRUE(r.chat.stream);
  EXPECT_EQ(r.echo["metadata"]["k"], "v");
  EXPECT_FLOAT_EQ(r.chat.params.top_p, 0.9f);
  EXPECT_EQ(r.echo["top_p"], 0.9);
}

// frost's "speculative" extension reaches the chat request the responses body becomes, and its errors keep
// the field's name.
TEST(OpenAiResponses, SpeculativeExtension) {
  ResponsesRequest r = ok(R"({"model":"m","input":"x","speculative":{"method":"ngram","num_tokens":3}})");
  EXPECT_EQ(r.chat.spec_method, SpecMethod::kNgram);
  EXPECT_EQ(r.chat.spec_num_tokens, 3);
  EXPECT_EQ(ok(R"({"model":"m","input":"x"})").chat.spec_method, SpecMethod::kServer);
  auto e = parse_responses_request(R"({"model":"m","input":"x","speculative":{"num_tokens":-2}})",
                                   LimitsSection());
  ASSERT_TRUE(std::holds_alternative<ApiError>(e));
  EXPECT_EQ(std::get<ApiError>(e).param, "speculative.num_tokens");
  EXPECT_NE(std::get<ApiError>(e).message.find("speculative.num_tokens: must be >= 0, got -2"),
            std::string::npos)
      << std::get<ApiError>(e).message;
}

TEST(OpenAiResponses, RefusalsNameTheField) {
  struct Case {
    std::string extra, param, needle;
  };
  const std::vector<Case> cases = {
      {R"("previous_response_id":"resp_1")", "previous_response_id", "stateless"},
      {R"("conversation":"conv_1")", "conversation", "send the whole conversation in input"},
      {R"("background":true)", "background", "background"},
      {R"("prompt":{"id":"p"})", "prompt", "prompt"},
      {R"("truncation":"auto")", "truncation", "disabled"},
      {R"("reasoning":{"effort":"high"})", "reasoning.effort", "reasoning"},
      {R"("include":["message.output_text.logprobs"])", "include", "not supported"},
      {R"("frobnicate":1)", "frobnicate", "unrecognized"},
      {R"("max_output_tokens":0)", "max_output_tokens", "max_output_tokens: must be in"},
      {R"("temperature":3)", "temperature", "temperature"},
      {R"("tools":[{"type":"web_search"}])", "tools[0].type", "function tools only"},
      {R"("tools":[{"type":"function","name":"bad name"}])", "tools[0].name", "tools[0].name:"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}])", "tools[0].function", "unknown field"},
      {R"("tools":[{"type":"function","name":"f","parameters":[]}])", "tools[0].parameters",
       "tools[0].parameters"},
      {R"("tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"})",
       "tool_choice", "not in tools"},
      {R"("tool_choice":{"type":"web_search_preview"})", "tool_choice.type", "not supported"},
      {R"("text":{"format":{"type":"json_schema","name":"x","schema":3}})", "text.format.schema",
       "text.format.schema:"},
      {R"("text":{"format":{"type":"grammar"}})", "text.format.type", "unknown value"},
      {R"("store":"yes")", "store", "boolean"},
  };
  for (const Case& c : cases) {
    const ApiError e = err(R"({"model":"m","input":"x",)" + c.extra + "}");
    EXPECT_EQ(e.http, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra << " -> " << e.message;
    EXPECT_NE(e.message.find(c.needle), std::string::npos) << c.extra << " -> " << e.message;
  }
  EXPECT_EQ(err(R"({"model":"m"})").param, "input");
  EXPECT_EQ(err(R"({"input":"x"})").param, "model");
  EXPECT_EQ(err(R"({"model":"m","input":[]})").param, "input");
  EXPECT_EQ(err("[1]").param, "");
  const ApiError ref = err(R"({"model":"m","input":[{"type":"item_reference","id":"msg_1"}]})");
  EXPECT_EQ(ref.param, "input[0].type");
  EXPECT_NE(ref.message.find("stateless"), std::string::npos);
  EXPECT_EQ(err(R"({"model":"m","input":[{"type":"reasoning","summary":[]}]})").param, "input[0].type");
  EXPECT_EQ(
      err(R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})")
          .param,
      "input[0].content[0].type");
  EXPECT_EQ(err(R"({"model":"m","input":[{"role":"tool","content":"x"}]})").param, "input[0].role");
  EXPECT_EQ(err(R"({"model":"m","input":[{"role":"user"}]})").param, "input[0].content");
  EXPECT_EQ(err(R"({"model":"m","input":[{"role":"user","content":"x","name":"n"}]})").param,
            "input[0].name");
  EXPECT_EQ(
      err(R"({"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}]})")
          .param,
      "input[0].arguments");
  EXPECT_EQ(err(R"({"model":"m","input":[{"type":"function_call_output","output":"x"}]})").param,
            "input[0].call_id");
}

TEST(OpenAiResponses, ChatFieldNamesMapBack) {
  const std::vector<std::string> origin = {"instructions", "input[0]", "input[2]"};
  EXPECT_EQ(responses_field("messages[2].content", origin), "input[2].content");
  EXPECT_EQ(responses_field("messages[2].tool_calls[1].function.arguments", origin), "input[2]");
  EXPECT_EQ(responses_field("messages[0].content", origin), "instructions");
  EXPECT_EQ(responses_field("messages[9]", origin), "input");
  EXPECT_EQ(responses_field("messages", origin), "input");
  EXPECT_EQ(responses_field("prompt", origin), "input");
  EXPECT_EQ(responses_field("response_format.json_schema.schema", origin), "text.format.schema");
  EXPECT_EQ(responses_field("response_format", origin), "text.format");
  EXPECT_EQ(responses_field("tools[12].function.parameters", origin), "tools[12].parameters");
  EXPECT_EQ(responses_field("tools[3].function", origin), "tools[3]");
  EXPECT_EQ(responses_field("tool_choice.function.name", origin), "tool_choice.name");
  EXPECT_EQ(responses_field("max_tokens", origin), "max_output_tokens");
  EXPECT_EQ(responses_field("temperature", origin), "temperature");
  ApiError e;
  e.param = "tools[1].function.parameters";
  e.message = "tools[1].function.parameters: unsupported keyword";
  e = responses_error(e, origin);
  EXPECT_EQ(e.param, "tools[1].parameters");
  EXPECT_EQ(e.message, "tools[1].parameters: unsupported keyword");
}

// Items without their random ids: what must be equal across splits.
std::string shape(const ResponsesOutput& out) {
  std::string s;
  for (const auto& it : out.items())
    s += it.is_call ? "call(" + it.name + "," + it.arguments + ")" : "msg(" + it.text + ")";
  return s;
}

std::vector<std::string> types(const std::vector<ojson>& evs) {
  std::vector<std::string> t;
  for (const ojson& e : evs) t.push_back(e["type"]);
  return t;
}

TEST(OpenAiResponses, PlainTextOutputAndEvents) {
  ResponsesOutput out(ToolCallFormat::kNone, "");
  std::vector<ojson> evs;
  out.feed("Once upon", &evs);
  out.feed(" a time", &evs);
  out.finish(false, &evs);
  EXPECT_EQ(shape(out), "msg(Once upon a time)");
  EXPECT_EQ(out.output_text(), "Once upon a time");
  EXPECT_EQ(types(evs), (std::vector<std::string>{"response.output_item.added", "response.content_part.added",
                                                  "response.output_text.delta", "response.output_text.delta",
                                                  "response.output_text.done", "response.content_part.done",
                                                  "response.output_item.done"}));
  EXPECT_EQ(evs[0]["item"]["status"], "in_progress");
  EXPECT_EQ(evs[0]["item"]["content"], ojson::array());
  EXPECT_EQ(evs[2]["delta"], "Once upon");
  EXPECT_EQ(evs[2]["item_id"], out.items()[0].id);
  EXPECT_EQ(evs[2]["output_index"], 0);
  EXPECT_EQ(evs[4]["text"], "Once upon a time");
  EXPECT_EQ(evs[6]["item"]["status"], "completed");
  const ojson o = out.output_json();
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0]["type"], "message");
  EXPECT_EQ(o[0]["role"], "assistant");
  EXPECT_EQ(o[0]["content"][0]["type"], "output_text");
  EXPECT_EQ(o[0]["content"][0]["text"], "Once upon a time");
  EXPECT_EQ(o[0]["content"][0]["annotations"], ojson::array());
  EXPECT_EQ(out.items()[0].id.rfind("msg_", 0), 0u);

  ResponsesOutput cut(ToolCallFormat::kNone, "");
  cut.feed("abc", nullptr);
  cut.finish(true, nullptr);
  EXPECT_EQ(cut.output_json()[0]["status"], "incomplete");

  ResponsesOutput empty(ToolCallFormat::kNone, "");
  std::vector<ojson> eevs;
  empty.finish(false, &eevs);
  EXPECT_EQ(shape(empty), "msg()");  // an empty output is still a message
  EXPECT_EQ(eevs.size(), 5u);        // added, part added, text done, part done, item done
}

TEST(OpenAiResponses, ForcedCallsBecomeFunctionCallItems) {
  ResponsesOutput out(ToolCallFormat::kCallList, "");
  std::vector<ojson> evs;
  out.feed(R"([{"name":"get_weather","parameters":{"city":"Paris",)", &evs);
  out.feed(R"("unit":"c"}}, {"name":"f","parameters":{}}])", &evs);
  out.finish(false, &evs);
  EXPECT_EQ(shape(out), R"(call(get_weather,{"city":"Paris","unit":"c"})call(f,{}))");
  EXPECT_EQ(out.output_text(), "");
  EXPECT_EQ(types(evs),
            (std::vector<std::string>{"response.output_item.added", "response.function_call_arguments.delta",
                                      "response.function_call_arguments.done", "response.output_item.done",
                                      "response.output_item.added", "response.function_call_arguments.delta",
                                      "response.function_call_arguments.done", "response.output_item.done"}));
  EXPECT_EQ(evs[0]["item"]["type"], "function_call");
  EXPECT_EQ(evs[0]["item"]["arguments"], "");
  EXPECT_EQ(evs[2]["arguments"], R"({"city":"Paris","unit":"c"})");
  EXPECT_EQ(evs[3]["item"]["status"], "completed");
  EXPECT_EQ(evs[4]["output_index"], 1);
  const ojson o = out.output_json();
  EXPECT_EQ(o[0]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(o[0]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_NE(o[0]["call_id"], o[1]["call_id"]);

  ResponsesOutput named(ToolCallFormat::kArguments, "get_weather");
  named.feed(R"( {"city":"Rome","unit":"f"})", nullptr);
  named.finish(false, nullptr);
  EXPECT_EQ(shape(named), R"(call(get_weather,{"city":"Rome","unit":"f"}))");

  // Cut before the array closed: the text comes back as the message, incomplete.
  ResponsesOutput cut(ToolCallFormat::kCallList, "");
  cut.feed(R"([{"name":"get_weather","param)", nullptr);
  cut.finish(true, nullptr);
  EXPECT_EQ(shape(cut), R"(msg([{"name":"get_weather","param))");
}

TEST(OpenAiResponses, ItemOrderIsTheTextsWhateverTheSplit) {
  const std::vector<std::string> texts = {
      "Let me check. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> and then some text",
      "plain words only",
      "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"g\", "
      "\"arguments\": "
      "{\"x\": [1, 2]}}</tool_call>",
      "<tool_call>{\"name\": broken}</tool_call> rest",
  };
  for (const std::string& t : texts) {
    ResponsesOutput whole(ToolCallFormat::kHermes, "");
    whole.feed(t, nullptr);
    whole.finish(false, nullptr);
    for (size_t step : {1, 2, 3, 7, 16}) {
      ResponsesOutput pieces(ToolCallFormat::kHermes, "");
      std::vector<ojson> evs;
      for (size_t i = 0; i < t.size(); i += step) pieces.feed(t.substr(i, step), &evs);
      pieces.finish(false, &evs);
      EXPECT_EQ(shape(pieces), shape(whole)) << t << " step " << step;
      // The deltas add up to the message text, and each item's events use its own output_index.
      std::string deltas;
      for (const ojson& e : evs) {
        if (e["type"] == "response.output_text.delta") deltas += e["delta"].get<std::string>();
        if (e.contains("item_id")) {
          const size_t idx = e["output_index"];
          EXPECT_EQ(e["item_id"], pieces.items()[idx].id);
        }
      }
      EXPECT_EQ(deltas, pieces.output_text());
    }
  }
  ResponsesOutput first(ToolCallFormat::kHermes, "");
  first.feed(texts[0], nullptr);
  first.finish(false, nullptr);
  EXPECT_EQ(shape(first), R"(msg(Let me check.)call(f,{"a":1}))");
  ResponsesOutput after(ToolCallFormat::kHermes, "");
  after.feed(texts[1], nullptr);
  after.finish(false, nullptr);
  EXPECT_EQ(shape(after), R"(call(f,{})msg(and then some text))");  // the message where its text began
}

TEST(OpenAiResponses, ResponseObjectAndEventFrames) {
  ResponsesRequest r = ok(R"({"model":"m","input":"x","instructions":"i","max_output_tokens":5})");
  ResponsesOutput out(ToolCallFormat::kNone, "");
  out.feed("hello", nullptr);
  out.finish(true, nullptr);
  ResponseStatus st;
  st.status = "incomplete";
  st.incomplete_length = true;
  st.has_usage = true;
  st.input_tokens = 11;
  st.output_tokens = 5;
  const ResponseMeta meta{"resp_abc", 1700000000, "stories"};
  const ojson o = response_object(meta, r.echo, st, &out);
  EXPECT_EQ(o["id"], "resp_abc");
  EXPECT_EQ(o["object"], "response");
  EXPECT_EQ(o["created_at"], 1700000000);
  EXPECT_EQ(o["status"], "incomplete");
  EXPECT_EQ(o["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_TRUE(o["error"].is_null());
  EXPECT_EQ(o["model"], "stories");
  EXPECT_EQ(o["output_text"], "hello");
  EXPECT_EQ(o["output"][0]["content"][0]["text"], "hello");
  EXPECT_EQ(o["instructions"], "i");
  EXPECT_EQ(o["max_output_tokens"], 5);
  EXPECT_EQ(o["store"], false);
  EXPECT_TRUE(o["previous_response_id"].is_null());
  EXPECT_EQ(o["tools"], ojson::array());
  EXPECT_EQ(o["parallel_tool_calls"], true);
  EXPECT_EQ(o["usage"]["input_tokens"], 11);
  EXPECT_EQ(o["usage"]["output_tokens"], 5);
  EXPECT_EQ(o["usage"]["total_tokens"], 16);
  EXPECT_EQ(o["usage"]["input_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(o["usage"]["output_tokens_details"]["reasoning_tokens"], 0);

  ResponseStatus failed;
  failed.status = "failed";
  failed.error = ApiError{};
  failed.error->message = "boom";
  const ojson f = response_object(meta, r.echo, failed, nullptr);
  EXPECT_EQ(f["error"]["code"], "server_error");
  EXPECT_EQ(f["error"]["message"], "boom");
  EXPECT_EQ(f["output"], ojson::array());
  EXPECT_TRUE(f["usage"].is_null());

  ResponsesEvents frames;
  const std::string a = frames.frame(ResponsesEvents::lifecycle("response.created", o));
  const std::string b = frames.frame(ojson{{"type", "response.output_text.delta"}, {"delta", "x"}});
  EXPECT_EQ(a.rfind("event: response.created\ndata: {", 0), 0u);
  EXPECT_EQ(a.substr(a.size() - 2), "\n\n");
  const ojson ja = ojson::parse(a.substr(a.find("data: ") + 6));
  const ojson jb = ojson::parse(b.substr(b.find("data: ") + 6));
  EXPECT_EQ(ja["sequence_number"], 0);
  EXPECT_EQ(ja["response"]["id"], "resp_abc");
  EXPECT_EQ(jb["sequence_number"], 1);
  EXPECT_EQ(new_response_id("resp_").size(), 29u);
}

}  // namespace
}  // namespace frost::server::openai
