#include "core/model/chat_prompt.h"

#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/fs.h"

namespace frost {

// The default template (chat_prompt.h). Choices: the prompt starts with the tokenizer's BOS when it has one
// (what a model without a chat template was pretrained on; "" for BOS-less tokenizers); the system turn comes
// first and carries the tool list; an assistant turn's tool calls follow its text, one <tool_call> block
// each; tool results go back as a user turn of <tool_response> blocks (consecutive results share one turn),
// as Hermes-format models were trained.
const char kDefaultChatTemplate[] = R"JINJA({{- bos_token }}
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' and messages[0].content is string %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- 'Functions you may call:\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\nTo call one, answer:\n<tool_call>\n{"name": <name>, "arguments": <object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + (messages[0].content if messages[0].content is string else '') + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for call in message.tool_calls %}
{{- '\n<tool_call>\n{"name": ' + (call.function.name | tojson) + ', "arguments": ' + (call.function.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or loop.previtem.role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + (message.content if message.content is string else '') + '\n</tool_response>' }}
{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + (message.content if message.content is string else '') + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})JINJA";

namespace {

constexpr std::string_view kEscapeMark = "\xEF\xB7\x90";  // U+FDD0

// escape_special_text's marks out of `text`: a doubled mark is one literal U+FDD0, a single one is dropped.
std::string unescape_special_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kEscapeMark.size(), kEscapeMark) != 0) {
      out += text[i++];
      continue;
    }
    i += kEscapeMark.size();
    if (text.compare(i, kEscapeMark.size(), kEscapeMark) == 0) {
      out += kEscapeMark;
      i += kEscapeMark.size();
    }
  }
  return out;
}

}  // namespace

std::string escape_special_text(const std::string& content,
                                const std::vector<std::pair<std::string, int32_t>>& specials) {
  std::string out;
  out.reserve(content.size());
  for (size_t i = 0; i < content.size();) {
    if (content.compare(i, kEscapeMark.size(), kEscapeMark) == 0) {
      out += kEscapeMark;
      out += kEscapeMark;
      i += kEscapeMark.size();
      continue;
    }
    // A special token's text starting here: its first char, the mark, and on (the rest is scanned again, so
    // an overlapping token inside it is marked too).
    bool special_here = false;
    for (const auto& sp : specials)
      special_here = special_here || content.compare(i, sp.first.size(), sp.first) == 0;
    size_t n = 1;
    while (i + n < content.size() && (static_cast<unsigned char>(content[i + n]) & 0xC0) == 0x80) ++n;
    out.append(content, i, n);
    if (special_here) out += kEscapeMark;
    i += n;
  }
  return out;
}

std::vector<int32_t> encode_with_special_tokens(
    const Tokenizer& tok, const std::string& text,
    const std::vector<std::pair<std::string, int32_t>>& specials) {
  std::vector<int32_t> out;
  size_t pos = 0;
  const bool marked = text.find(kEscapeMark) != std::string::npos;
  auto encode_plain = [&](size_t from, size_t to) {
    if (to <= from) return;
    const std::string_view plain = std::string_view(text).substr(from, to - from);
    absl::StatusOr<std::vector<int32_t>> ids =
        marked ? tok.encode(unescape_special_text(plain), false) : tok.encode(plain, false);
    if (ids.ok()) out.insert(out.end(), ids->begin(), ids->end());
  };
  // next[j]: where specials[j] occurs next at or after `pos` (searched again only once `pos` has passed it),
  // so the text is scanned once per special token, not once per special token per occurrence.
  std::vector<size_t> next;
  next.reserve(specials.size());
  for (const auto& sp : specials) next.push_back(text.find(sp.first));
  while (pos < text.size()) {
    // The earliest special token's text from `pos` (the longest one at a tie).
    size_t best = std::string::npos, best_len = 0;
    int32_t best_id = -1;
    for (size_t j = 0; j < specials.size(); ++j) {
      const auto& [piece, id] = specials[j];
      if (next[j] != std::string::npos && next[j] < pos) next[j] = text.find(piece, pos);
      const size_t at = next[j];
      if (at == std::string::npos) continue;
      if (at < best || (at == best && piece.size() > best_len)) {
        best = at;
        best_len = piece.size();
        best_id = id;
      }
    }
    if (best == std::string::npos) {
      encode_plain(pos, text.size());
      break;
    }
    encode_plain(pos, best);
    out.push_back(best_id);
    pos = best + best_len;
  }
  return out;
}

std::vector<std::pair<std::string, int32_t>> special_token_texts(const Tokenizer& tok) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.is_special(id)) continue;
    std::string piece = tok.id_to_piece(id);
    if (!piece.empty()) out.emplace_back(std::move(piece), id);
  }
  return out;
}

absl::StatusOr<ChatPrompt::Source> ChatPrompt::choose_source(const std::string& configured_path,
                                                             const std::string& model_source) {
  constexpr int64_t kMaxTemplateBytes = 1 << 20;
  if (!configured_path.empty()) {
    absl::StatusOr<std::string> text =
        read_file(configured_path, kMaxTemplateBytes, "1 MiB");  // a FIFO: refused
    if (!text.ok()) {
      return absl::Status(text.status().code(),
                          absl::StrCat("model.chat_template: cannot read \"", configured_path,
                                       "\": ", text.status().message()));
    }
    return Source{*std::move(text), absl::StrCat("model.chat_template ", configured_path), false};
  }
  if (!absl::StartsWith(model_source, "builtin:")) {
    absl::StatusOr<std::optional<std::string>> own = load_chat_template_source(model_source);
    if (!own.ok()) return own.status();
    if (*own)
      return Source{**std::move(own), absl::StrCat(model_source, " (the model's chat template)"), false};
  }
  return Source{kDefaultChatTemplate, "frost's default template (ChatML, Hermes tool calls)", true};
}

ChatPrompt::ChatPrompt(const Tokenizer& tok, Source source, ChatTemplate tmpl)
    : tok_(tok), source_(std::move(source)), template_(std::move(tmpl)) {
  specials_ = special_token_texts(tok);
  if (tok.bos_id() >= 0) bos_ = tok.id_to_piece(tok.bos_id());
  if (tok.eos_id() >= 0) eos_ = tok.id_to_piece(tok.eos_id());
  tool_format_ = detect_tool_call_format(source_.text);
}

absl::StatusOr<std::shared_ptr<const ChatPrompt>> ChatPrompt::create(const Tokenizer& tok, Source source) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::parse(source.text);
  if (!t.ok()) return t.status();
  return std::shared_ptr<const ChatPrompt>(new ChatPrompt(tok, std::move(source), *std::move(t)));
}

namespace {

// Every string value under `v` (not object keys) escaped: the request's text is data. Iterative: the request
// nests at most a few hundred levels (the API layer bounds it), but the walk needs no stack either way.
void escape_strings(nlohmann::ordered_json& v, const std::vector<std::pair<std::string, int32_t>>& specials) {
  std::vector<nlohmann::ordered_json*> todo{&v};
  while (!todo.empty()) {
    nlohmann::ordered_json* x = todo.back();
    todo.pop_back();
    if (x->is_string()) {
      *x = escape_special_text(x->get_ref<const std::string&>(), specials);
    } else if (x->is_structured()) {
      for (auto& child : *x) todo.push_back(&child);
    }
  }
}

}  // namespace

absl::StatusOr<std::string> ChatPrompt::render(const Request& req) const {
  if (!req.messages || !req.messages->is_array())
    return absl::InvalidArgumentError("messages: expected an array of messages");
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (req.kwargs && req.kwargs->is_object()) {
    for (auto it = req.kwargs->begin(); it != req.kwargs->end(); ++it) vars[it.key()] = it.value();
  }
  vars["messages"] = *req.messages;
  if (req.tools && !req.tools->is_null()) vars["tools"] = *req.tools;
  escape_strings(vars, specials_);
  vars["add_generation_prompt"] = req.add_generation_prompt;
  vars["bos_token"] = bos_;
  vars["eos_token"] = eos_;
  return template_.render_json(vars.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

std::vector<int32_t> ChatPrompt::encode(const std::string& rendered) const {
  return encode_with_special_tokens(tok_, rendered, specials_);
}

}  // namespace frost
