#include "server/openai_render.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"

namespace frost::server::openai {

PromptSource make_prompt_source(const Tokenizer* tok, const std::string& model_name,
                                const std::string& model_source, const std::string& configured_template,
                                int64_t max_context) {
  PromptSource s;
  s.tok = tok;
  s.max_context = max_context;
  if (!tok) {  // chat renders text that only a tokenizer can turn into the prompt's ids
    s.chat_unavailable = absl::StrCat("the model ", model_name,
                                      " has no tokenizer; use /v1/completions with a "
                                      "token-id prompt");
    return s;
  }
  absl::StatusOr<ChatPrompt::Source> source = ChatPrompt::choose_source(configured_template, model_source);
  if (!source.ok()) {
    s.chat_unavailable = std::string(source.status().message());
    return s;
  }
  const std::string origin = source->origin;
  absl::StatusOr<std::shared_ptr<const ChatPrompt>> chat = ChatPrompt::create(*tok, *std::move(source));
  if (!chat.ok()) {
    s.chat_unavailable = std::string(chat.status().message());
    return s;
  }
  s.chat = *std::move(chat);
  FROST_LOG_INFO("frostd: chat template: %s; tool calls parsed as %s", origin.c_str(),
                 tool_call_format_name(s.chat->tool_format()));
  return s;
}

namespace {

// A tool call id in the shape Mistral's templates demand (9 letters and digits, else they raise): the id's
// letters and digits, the last 9, left-padded with '0'. Deterministic, so an assistant call and the tool
// result that answers it still match; ids frost generated for a Mistral template are already this shape (vLLM
// truncates to the last 9 characters too).
std::string mistral_id(const std::string& id) {
  std::string alnum;
  for (const char c : id)
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) alnum += c;
  if (alnum.size() > 9) alnum = alnum.substr(alnum.size() - 9);
  return std::string(9 - alnum.size(), '0') + alnum;
}

nlohmann::ordered_json with_mistral_ids(nlohmann::ordered_json messages) {
  for (auto& m : messages) {
    if (auto it = m.find("tool_call_id"); it != m.end() && it->is_string())
      *it = mistral_id(it->get<std::string>());
    if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
      for (auto& c : *calls)
        if (auto id = c.find("id"); id != c.end() && id->is_string())
          *id = mistral_id(id->get<std::string>());
    }
  }
  return messages;
}

}  // namespace

std::variant<std::vector<BuiltPrompt>, ApiError> build_prompts(const ParsedRequest& p,
                                                               const PromptSource& src,
                                                               const LimitsSection& limits) {
  std::vector<BuiltPrompt> out;
  if (p.endpoint == Endpoint::kCompletions) {
    for (const PromptInput& in : p.prompts) {
      BuiltPrompt b;
      b.text = in.text;
      b.ids = in.ids;
      out.push_back(std::move(b));
    }
    return out;
  }
  if (!src.chat) {
    ApiError e;
    e.param = "messages";
    e.message = absl::StrCat("chat is not available for this model: ", src.chat_unavailable);
    return e;
  }
  ChatPrompt::Request req;
  req.messages = &p.messages;
  nlohmann::ordered_json mistral_messages;
  if (src.chat->tool_format() == ToolCallFormat::kMistral) {
    mistral_messages = with_mistral_ids(p.messages);
    req.messages = &mistral_messages;
  }
  req.tools = p.tools.any() ? &p.tools.tools : nullptr;
  req.kwargs = p.template_kwargs.is_object() ? &p.template_kwargs : nullptr;
  req.add_generation_prompt = p.add_generation_prompt;
  absl::StatusOr<std::string> text = src.chat->render(req);
  if (!text.ok()) return error_from_status(text.status(), "messages");
  if (text->size() > static_cast<size_t>(limits.max_prompt_bytes)) {
    ApiError e;
    e.http = 413;
    e.param = "messages";
    e.message = absl::StrCat("messages: the rendered prompt is ", text->size(),
                             " bytes, over limits.max_prompt_bytes = ", limits.max_prompt_bytes);
    return e;
  }
  BuiltPrompt b;
  b.ids = src.chat->encode(*text);
  b.add_bos = false;  // the template writes bos_token where the model wants it
  b.rendered = *std::move(text);
  if (b.ids.empty())
    return error_from_status(absl::InvalidArgumentError("messages: empty prompt"), "messages");
  out.push_back(std::move(b));
  return out;
}

absl::StatusOr<std::vector<int32_t>> prompt_ids(const BuiltPrompt& b, const PromptSource& src) {
  if (!b.ids.empty()) return b.ids;
  if (!src.tok)
    return absl::FailedPreconditionError("prompt: the served model has no tokenizer; send token ids");
  return src.tok->encode(b.text, b.add_bos);
}

int32_t default_chat_max_tokens(int64_t prompt_tokens, int64_t max_context, const LimitsSection& limits) {
  const int64_t room = std::max<int64_t>(1, max_context - prompt_tokens);
  return static_cast<int32_t>(std::min<int64_t>(room, limits.max_new_tokens));
}

}  // namespace frost::server::openai
