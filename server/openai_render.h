#pragma once
// What a parsed OpenAI request runs: its prompts as the engine gets them (a chat request rendered through the
// served model's ChatPrompt, core/model/chat_prompt.h), shared by /v1/completions, /v1/chat/completions, the
// render and tokenize endpoints and /v1/responses, so every one of them computes the same ids for the same
// request. No I/O.
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/chat_prompt.h"
#include "core/model/tokenizer.h"
#include "server/openai_api.h"
#include "server/server_config.h"

namespace frost::server::openai {

// What the served model offers for prompts.
struct PromptSource {
  const Tokenizer* tok = nullptr;          // null: token-id prompts only
  std::shared_ptr<const ChatPrompt> chat;  // null: chat refused, for `chat_unavailable`
  std::string chat_unavailable;
  int64_t max_context = 0;  // prompt + completion tokens
};
// The model's PromptSource: model.chat_template, else the model's template, else frost's default
// (chat_prompt.h).
PromptSource make_prompt_source(const Tokenizer* tok, const std::string& model_name,
                                const std::string& model_source, const std::string& configured_template,
                                int64_t max_context);

// One engine prompt: text (tokenized by the engine with BOS, as Tokenizer::encode(text, true)) or ids.
struct BuiltPrompt {
  std::string text;
  std::vector<int32_t> ids;
  bool add_bos = true;
  std::string rendered;  // chat: the template's output (what /v1/chat/completions/render shows)
};
std::variant<std::vector<BuiltPrompt>, ApiError> build_prompts(const ParsedRequest& p,
                                                               const PromptSource& src,
                                                               const LimitsSection& limits);
// The ids a BuiltPrompt runs with (what the engine computes from it).
absl::StatusOr<std::vector<int32_t>> prompt_ids(const BuiltPrompt& b, const PromptSource& src);

// Chat without max_tokens / max_completion_tokens: the context's remainder after the prompt, within
// limits.max_new_tokens (OpenAI has no other cap; the engine refuses a prompt that leaves no room).
int32_t default_chat_max_tokens(int64_t prompt_tokens, int64_t max_context, const LimitsSection& limits);

}  // namespace frost::server::openai
