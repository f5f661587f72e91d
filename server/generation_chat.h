#pragma once
// Chat over gRPC: GenerateRequest.messages, tools, tool_choice, parallel_tool_calls, add_generation_prompt
// and chat_template_kwargs (proto/frost/v1/generation.proto) become the OpenAI endpoint's chat request
// (server/openai_chat.h parses them, with the same checks and field names) and are rendered by the same
// PromptSource (server/openai_render.h, one ChatPrompt per served model, core/model/chat_prompt.h), so
// Generate with messages runs the ids POST /v1/chat/completions runs for the same messages. The output is
// parsed for tool calls the same way too (core/model/tool_calls.h). No I/O; unit tested in
// tests/unit/server/generation_chat_test.cc.
#include <string>

#include "absl/status/status.h"
#include "core/generate/request.h"
#include "core/model/tool_calls.h"
#include "frost/v1/generation.pb.h"
#include "server/openai_render.h"
#include "server/server_config.h"

namespace frost::server {

// How a chat request's output is read once the engine has finished.
struct GrpcChat {
  ToolCallFormat tool_format = ToolCallFormat::kNone;  // kNone: the output is plain content
  ToolCallFormat id_format = ToolCallFormat::kNone;    // the template's format: the shape of new call ids
  std::string forced_name;                             // tool_choice.function: the function called
  std::string constraint_field;  // a forced call's constraint: the field its errors name ("tools", ...)
};

// Renders `req`'s messages (req.messages_size() > 0) with `src` into out->prompt_ids (add_bos off: the
// template writes bos_token), and applies the chat defaults of the OpenAI endpoint: without
// sampling.max_new_tokens the context's remainder (within limits.max_new_tokens); a forced tool choice
// (required, or a named function) constrains the output (refused next to a sampling constraint, as one
// constraint per request). INVALID_ARGUMENT naming the field ("messages[1].role: ..."); FAILED_PRECONDITION
// when the served model cannot serve chat (no tokenizer, a template that does not parse).
absl::Status apply_chat(const v1::GenerateRequest& req, const openai::PromptSource& src,
                        const LimitsSection& limits, GenerationRequest* out, GrpcChat* chat);

// The output `text` of a chat request parsed for tool calls (chat.tool_format): when it holds any, the
// final message gets them (fresh ids), the content outside them and FINISH_REASON_TOOL_CALLS, as the OpenAI
// endpoint answers "tool_calls".
void add_tool_calls(const GrpcChat& chat, const std::string& text, v1::Final* f);

}  // namespace frost::server
