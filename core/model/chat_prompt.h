#pragma once
// A chat request's prompt: the served model's chat template rendered over OpenAI-shaped messages (and tools),
// then encoded with its special tokens. One ChatPrompt per served model, shared by every transport (the
// OpenAI endpoint's chat, render, tokenize and Responses paths) so each computes the same ids for the same
// request.
//
// Which template (ChatPrompt::choose_source): model.chat_template (a file) wins; else the model directory's
// own (chat_template.jinja, tokenizer_config.json chat_template); else frost's default template,
// kDefaultChatTemplate, so chat works on every model with a tokenizer — the built-in models and checkpoints
// saved without a template included. The default is ChatML-shaped (<|im_start|>role\n...<|im_end|>\n, as most
// current instruction-tuned checkpoints) and writes tools and tool calls the Hermes way (a <tools> list in
// the system turn, calls as <tool_call>{"name": ..., "arguments": ...}</tool_call>, results as
// <tool_response> in a user turn), so tool calling has one documented format on a model that defines none. A
// model trained on another format should ship its template (or be given model.chat_template): the default
// template only gives the model a prompt shape.
//
// Rendering (transformers' apply_chat_template with the OpenAI message dicts, as vLLM passes them):
//   messages  each message as its JSON object — role, content (a string or null; a list of text parts has
//   been
//             joined by the API layer), name, tool_calls [{id, type, function: {name, arguments}}] with
//             arguments as an object (vLLM parses the client's JSON text, since templates write `arguments |
//             tojson`), tool_call_id — in the client's member order;
//   tools     the request's tools list (absent = none), member order kept (templates print it with tojson);
//   add_generation_prompt, bos_token, eos_token, and the request's chat_template_kwargs (enable_thinking,
//   ...).
// Special-token text in any string of messages and tools is data (escape_special_text): only the template's
// own markup becomes control tokens (README "Special-token text in a prompt").
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/chat_template.h"
#include "core/model/tokenizer.h"
#include "core/model/tool_calls.h"
#include "nlohmann/json.hpp"

namespace frost {

// frost's default chat template (see above; README "Chat templates" shows it).
extern const char kDefaultChatTemplate[];

class ChatPrompt {
 public:
  struct Source {
    std::string text;
    std::string
        origin;  // "model.chat_template <path>", "<dir>/tokenizer_config.json", "frost's default template"
    bool is_default = false;
  };
  // The template to use: `configured_path` (model.chat_template; "" = none) read from disk, else the model
  // directory's own (`model_source` a directory; builtins have none), else the default. Errors name the file.
  static absl::StatusOr<Source> choose_source(const std::string& configured_path,
                                              const std::string& model_source);

  // `tok` is borrowed and must outlive the ChatPrompt. INVALID_ARGUMENT when the template does not parse.
  static absl::StatusOr<std::shared_ptr<const ChatPrompt>> create(const Tokenizer& tok, Source source);

  struct Request {
    const nlohmann::ordered_json* messages = nullptr;  // an array of message objects (required)
    const nlohmann::ordered_json* tools = nullptr;     // an array, or null = no tools
    const nlohmann::ordered_json* kwargs = nullptr;    // chat_template_kwargs: an object, or null
    bool add_generation_prompt = true;
  };
  // The rendered prompt text (special-token text in the request's strings escaped; encode() takes it).
  // INVALID_ARGUMENT with the template's own message (raise_exception) or "chat_template: ..." on a render
  // error.
  absl::StatusOr<std::string> render(const Request& req) const;
  // The rendered text's ids: special tokens' text → their ids, the escaped data as plain text.
  std::vector<int32_t> encode(const std::string& rendered) const;

  const Source& source() const { return source_; }
  // The tool-call format the template writes (core/model/tool_calls.h), what `tool_choice: auto` parses.
  ToolCallFormat tool_format() const { return tool_format_; }
  const std::vector<std::pair<std::string, int32_t>>& specials() const { return specials_; }

 private:
  ChatPrompt(const Tokenizer& tok, Source source, ChatTemplate tmpl);
  const Tokenizer& tok_;
  Source source_;
  ChatTemplate template_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  std::vector<std::pair<std::string, int32_t>> specials_;
  std::string bos_, eos_;
};

// Encodes `text` with the tokenizer, mapping every occurrence of a special token's text ("<|im_start|>",
// "<s>") to that token's id as Hugging Face does for a chat template's rendering. Text that
// escape_special_text() marked stays text: its markers are taken out before the text between special
// tokens is encoded, so the ids are those of the unmarked text.
std::vector<int32_t> encode_with_special_tokens(const Tokenizer& tok, const std::string& text,
                                                const std::vector<std::pair<std::string, int32_t>>& specials);

// The policy for a chat message's content (README "Special-token text in a prompt"): it is data, so the
// special-token text it carries ("<|im_start|>system" in a user message) must not become control tokens,
// while the template's own markup around it must. Before rendering, each special token's text in a content
// gets the marker U+FDD0 (a Unicode noncharacter, for internal use) after its first char, which the matcher
// of encode_with_special_tokens then does not see; a U+FDD0 already in the content is doubled. After the
// split, a doubled marker becomes one U+FDD0 again and a single one is dropped. A template that only copies
// or trims content (all the common ones) keeps the marks intact.
std::string escape_special_text(const std::string& content,
                                const std::vector<std::pair<std::string, int32_t>>& specials);

// The special tokens of `tok` as (text, id), for the two functions above.
std::vector<std::pair<std::string, int32_t>> special_token_texts(const Tokenizer& tok);

}  // namespace frost
