// Chat over gRPC (server/generation_chat.h): GenerateRequest.messages rendered to the ids the OpenAI endpoint
// renders for the same body (server/openai_render.h), the chat defaults, and the refusals naming the field.
#include "server/generation_chat.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "core/model/tokenizer.h"
#include "server/generation_codec.h"
#include "server/openai_api.h"
#include "server/openai_render.h"
#include "tests/testing/test_util.h"

namespace frost::server {
namespace {

namespace oa = openai;

struct Fixture {
  std::unique_ptr<Tokenizer> tok = make_byte_tokenizer(300);
  oa::PromptSource src = oa::make_prompt_source(tok.get(), "m", "builtin:m", "", 4096);
  LimitsSection limits;
};

// The ids POST /v1/chat/completions runs for `body`.
std::vector<int32_t> http_ids(Fixture& f, const std::string& body) {
  auto parsed = oa::parse_request(oa::Endpoint::kChat, body, f.limits);
  EXPECT_TRUE(std::holds_alternative<oa::ParsedRequest>(parsed)) << std::get<oa::ApiError>(parsed).message;
  auto built = oa::build_prompts(std::get<oa::ParsedRequest>(parsed), f.src, f.limits);
  EXPECT_TRUE(std::holds_alternative<std::vector<oa::BuiltPrompt>>(built));
  return std::get<std::vector<oa::BuiltPrompt>>(built).front().ids;
}

absl::Status grpc_chat(Fixture& f, const v1::GenerateRequest& req, GenerationRequest* g, GrpcChat* chat) {
  absl::StatusOr<GenerationRequest> r = to_generation_request(req, f.limits);
  if (!r.ok()) return r.status();
  *g = *r;
  return apply_chat(req, f.src, f.limits, g, chat);
}

TEST(GenerationChatTest, SameIdsAsTheOpenAiEndpoint) {
  Fixture f;
  v1::GenerateRequest req;
  auto* s = req.add_messages();
  s->set_role("system");
  s->set_content("Be brief.");
  auto* u = req.add_messages();
  u->set_role("user");
  u->set_content("Weather in Oslo?");
  u->set_name("tim");
  auto* a = req.add_messages();
  a->set_role("assistant");
  auto* call = a->add_tool_calls();
  call->set_id("call_1");
  call->mutable_function()->set_name("weather");
  call->mutable_function()->set_arguments(R"({"city": "Oslo"})");
  auto* t = req.add_messages();
  t->set_role("tool");
  t->set_tool_call_id("call_1");
  t->set_content("4 degrees");
  auto* tool = req.add_tools()->mutable_function();
  tool->set_name("weather");
  tool->set_description("The weather");
  tool->set_parameters(R"({"type": "object", "properties": {"city": {"type": "string"}}})");
  GenerationRequest g;
  GrpcChat chat;
  ASSERT_TRUE(grpc_chat(f, req, &g, &chat).ok());
  const std::string body = R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?", "name": "tim"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "4 degrees"}],
    "tools": [{"type": "function", "function": {"name": "weather", "description": "The weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})";
  EXPECT_EQ(g.prompt_ids, http_ids(f, body));
  EXPECT_TRUE(g.prompt.empty());
  EXPECT_FALSE(g.add_bos);
  // No max_new_tokens: the context's remainder within limits.max_new_tokens, as OpenAI chat.
  EXPECT_EQ(g.params.max_new_tokens,
            oa::default_chat_max_tokens(static_cast<int64_t>(g.prompt_ids.size()), 4096, f.limits));
  EXPECT_EQ(chat.tool_format, f.src.chat->tool_format());  // tools, tool_choice auto: parsed
  EXPECT_EQ(g.constraint.kind, constrain::ConstraintSpec::Kind::kNone);

  // add_generation_prompt false continues the last message, as the endpoint's.
  req.set_add_generation_prompt(false);
  req.mutable_sampling()->set_max_new_tokens(7);
  ASSERT_TRUE(grpc_chat(f, req, &g, &chat).ok());
  std::string cont = body;
  cont.insert(cont.size() - 1, R"(, "add_generation_prompt": false)");
  EXPECT_EQ(g.prompt_ids, http_ids(f, cont));
  EXPECT_EQ(g.params.max_new_tokens, 7);
}

TEST(GenerationChatTest, ForcedToolChoiceConstrains) {
  Fixture f;
  v1::GenerateRequest req;
  req.add_messages()->set_role("user");
  req.add_tools()->mutable_function()->set_name("weather");
  req.mutable_tool_choice()->set_function("weather");
  GenerationRequest g;
  GrpcChat chat;
  ASSERT_TRUE(grpc_chat(f, req, &g, &chat).ok());
  EXPECT_EQ(g.constraint.kind, constrain::ConstraintSpec::Kind::kJsonSchema);
  EXPECT_EQ(chat.constraint_field, "tools[0].function.parameters");
  EXPECT_EQ(chat.forced_name, "weather");
  EXPECT_EQ(chat.tool_format, ToolCallFormat::kArguments);
  v1::Final fin;
  add_tool_calls(chat, R"({"city": "Oslo"})", &fin);
  ASSERT_EQ(fin.tool_calls_size(), 1);
  EXPECT_EQ(fin.tool_calls(0).function().name(), "weather");
  EXPECT_EQ(fin.finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  // With a sampling constraint too: refused, one constraint per request.
  req.mutable_sampling()->set_regex("a+");
  EXPECT_INVALID(grpc_chat(f, req, &g, &chat), "tool_choice: a forced tool call is itself a constraint");
}

TEST(GenerationChatTest, RefusalsNameTheField) {
  Fixture f;
  GenerationRequest g;
  GrpcChat chat;
  v1::GenerateRequest req;
  req.add_messages()->set_role("wizard");
  EXPECT_INVALID(grpc_chat(f, req, &g, &chat), "messages[0].role: unknown value \"wizard\"");
  req.mutable_messages(0)->set_role("tool");
  EXPECT_INVALID(grpc_chat(f, req, &g, &chat), "messages[0].tool_call_id: required");
  req.mutable_messages(0)->set_role("user");
  req.add_tools()->mutable_function()->set_name("f");
  req.mutable_tools(0)->mutable_function()->set_parameters("[1]");
  EXPECT_INVALID(grpc_chat(f, req, &g, &chat),
                 "tools[0].function.parameters: expected the JSON text of an object");
  req.mutable_tools(0)->mutable_function()->set_parameters("{");
  EXPECT_INVALID(grpc_chat(f, req, &g, &chat), "tools[0].function.parameters: not valid JSON");
  req.mutable_tools(0)->mutable_function()->clear_parameters();
  req.mutable_tool_choice()->set_function("g");
  EXPECT_INVALID(grpc_chat(f, req, &g, &chat), "tool_choice: names the function \"g\"");
  req.clear_tool_choice();
  req.set_chat_template_kwargs("3");
  EXPECT_INVALID(grpc_chat(f, req, &g, &chat), "chat_template_kwargs: expected the JSON text of an object");
  // No tokenizer: no chat.
  Fixture none;
  none.src = oa::make_prompt_source(nullptr, "m", "builtin:m", "", 4096);
  req.clear_chat_template_kwargs();
  const absl::Status st = grpc_chat(none, req, &g, &chat);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("messages: chat is not available"), std::string::npos) << st;
}

}  // namespace
}  // namespace frost::server
