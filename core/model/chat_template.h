#pragma once
// Chat templates: the Jinja2 subset that Hugging Face models' chat templates use, rendered the way
// transformers' apply_chat_template renders them, for an OpenAI-compatible /v1/chat/completions.
//
// Environment (transformers' `_compile_jinja_template`, utils/chat_template_utils.py):
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) + jinja2.ext.loopcontrols, a `tojson`
//   filter that is json.dumps(ensure_ascii=False, indent=...), and raise_exception(msg). So: a block or comment
//   tag eats the one newline after it (trim_blocks), spaces/tabs before a block or comment tag that starts a
//   line are dropped (lstrip_blocks), {%- -%} {{- -}} {#- -#} strip all whitespace on their side, {%+ and +%}
//   turn lstrip/trim off for that tag, and (jinja2's keep_trailing_newline=False) one trailing newline of the
//   source is dropped. The render variables are apply_chat_template's: messages, add_generation_prompt,
//   bos_token, eos_token, and tools = documents = none (render_json: any). strftime_now(format) formats the
//   current local time as transformers' does (Llama 3.x templates print today's date with it).
//
// Supported: {{ }}, {% if/elif/else %}, {% for x[, y] in xs [if cond] %}...{% else %}, loop.index/index0/
// revindex/revindex0/first/last/length/previtem/nextitem, {% break %} {% continue %}, {% set x = e %},
// {% set ns.attr = e %} with namespace(), {% generation %} (a pass-through), {# #}. Expressions: literals
// (str with Python escapes, int, float, true/false/none, lists, dicts with string keys), attribute, subscript,
// slices, + - * / // % ** ~, comparisons (chained), and/or/not, in/not in, `x if c else y`, `is [not] test`,
// filters and methods (see chat_template_builtins.cc), raise_exception, range, namespace, dict, strftime_now.
// Refused at parse time (INVALID_ARGUMENT naming line and column): macros, call/filter blocks, include/
// import/extends/block, raw, recursive loops, block set, tuple assignment, unknown filters and tests.
// Values behave like Python's: undefined prints as "" and is falsy; None prints "None", lists and dicts print
// as their Python repr; strings are sequences of code points. Case mapping (upper/lower/title/capitalize)
// covers Latin, Greek, Cyrillic and fullwidth Latin, not all of Unicode.
#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace frost {

struct ChatMessage {
  std::string role;
  std::string content;
};

namespace chat_template_internal {
struct Template;
}  // namespace chat_template_internal

// Immutable once parsed; render() may be called from many threads at once.
class ChatTemplate {
 public:
  // Parses the Jinja source. INVALID_ARGUMENT "chat_template: <what> at line L, column C" on syntax outside the
  // subset above, or on nesting deeper than the parser's bound (templates come from model files: untrusted).
  static absl::StatusOr<ChatTemplate> parse(std::string source);

  struct Context {
    std::string bos_token, eos_token;
    bool add_generation_prompt = true;
    // The instant strftime_now() formats (seconds since the epoch, shown in local time); nullopt: the clock.
    std::optional<int64_t> now;
  };

  // Renders `messages`. INVALID_ARGUMENT: raise_exception("...") gives exactly its message (e.g. "Conversation
  // roles must alternate user/assistant/user/assistant/..."); runtime type errors and use of undefined values
  // give "chat_template: <what> (line L)"; a render past its work bound (loop iterations, output or value size)
  // gives "chat_template: ... exceeds ...", never a hang.
  absl::StatusOr<std::string> render(const std::vector<ChatMessage>& messages, const Context& ctx) const;

  // The general form, for what ChatMessage cannot say (tool_calls, tool results, list content, tools, template
  // kwargs such as enable_thinking or date_string): `vars_json` is a JSON object whose members are the render
  // variables as apply_chat_template passes them (messages, add_generation_prompt, tools, bos_token, ...);
  // tools and documents are none unless given, anything else absent is undefined. JSON becomes Python values:
  // objects are dicts in member order, integers int, other numbers float, null None. INVALID_ARGUMENT for text
  // that is not a JSON object or nests deeper than 64 levels; render errors as above.
  absl::StatusOr<std::string> render_json(std::string_view vars_json, std::optional<int64_t> now = std::nullopt) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, std::shared_ptr<const chat_template_internal::Template> tmpl)
      : source_(std::move(source)), tmpl_(std::move(tmpl)) {}
  std::string source_;
  std::shared_ptr<const chat_template_internal::Template> tmpl_;
};

// The model's chat template source: <model_dir>/chat_template.jinja when present (newer transformers save it
// there, and it wins over the JSON field, as in transformers), else tokenizer_config.json "chat_template": a
// string, or a list of {"name", "template"} of which "default" is used. nullopt when the model has none (no
// file, no field, or null). Errors name the file and the field: NOT_FOUND never (absence is nullopt),
// INVALID_ARGUMENT for malformed JSON, a wrong type, or a list without "default".
absl::StatusOr<std::optional<std::string>> load_chat_template_source(const std::string& model_dir);

}  // namespace frost
