#pragma once
// Tool calls in model output: the text a model writes in its family's own call format → OpenAI's
// message.tool_calls (name + arguments as JSON text) and the content left around them, whole or streamed.
// Pure functions of the text, no I/O; malformed calls come back as content, never as an error, and no
// exception escapes.
//
// Formats (what each family's chat template asks the model to write):
//   json       Llama 3.1/3.2/3.3: the output is {"name": N, "parameters": {...}} ("arguments" accepted too),
//              optionally after "<|python_tag|>"; several objects separated by ";" and/or whitespace are
//              accepted (Llama 3.2 writes that), each optionally after its own "<|python_tag|>". Only at the
//              very start of the output (after whitespace): text before the first "{" makes the whole output
//              content.
//   hermes     Qwen 2.5 / Qwen3 / Hermes (and frost's default template):
//              "<tool_call>" ws {"name": N, "arguments": {...}} ws "</tool_call>", any number of blocks
//              anywhere in the text; the text outside the blocks (e.g. Qwen3's "<think>...</think>" before
//              them) is content.
//   mistral    "[TOOL_CALLS][{"name": N, "arguments": {...}, "id": ...}, ...]" and the newer
//              "[TOOL_CALLS]N[ARGS]{...}", any number of them back to back (whitespace between). frost's
//              detokenizer drops the special token [TOOL_CALLS], so a bare array [{...}, ...] at the start of
//              the output is a call list too. "[TOOL_CALLS]" (when it survives) may follow content; the bare
//              array may not.
//   arguments  tool_choice names one function: the whole output (trimmed) is its arguments object.
//   call_list  tool_choice "required": the whole output (trimmed) is a non-empty array of
//              {"name": N, "parameters"|"arguments": {...}}.
//
// A call is well-formed when its JSON parses (parse_json_bounded, 64 levels), "name" is a non-empty string
// and the arguments ("arguments" when present, else "parameters") are an object, or a JSON string whose text
// is an object (some models write that). Arguments come back compact (whitespace outside strings removed)
// with the model's own bytes otherwise: member order, number spelling and escapes as written. ToolCall
// carries no id (Mistral's "id" member is ignored): the endpoint makes its own.
//
// What a broken call does (an invalid object, a missing name, arguments an array, an unclosed block, anything
// after a call that is not another call):
//   json, mistral, arguments, call_list: the calls are the rest of the output, so nothing is final before the
//     end: one broken call → calls = {} and content = the whole text (trimmed as below).
//   hermes: a block is final at its "</tool_call>" (a stream has sent it by then and never takes anything
//     back), so a broken block turns itself and ALL the text after it into content; blocks before it stay
//     calls. With one block (the usual case) that is the same rule: calls = {}, content = the whole text.
//
// Content: the text outside the calls, concatenated, with leading and trailing whitespace (space, \t, \n, \r)
// removed; whitespace inside it is kept as written (e.g. "A <tool_call>...</tool_call> B" → "A  B").
// Whitespace and ";" between bare-JSON calls and the markers themselves are not content. For kNone the
// content is the text exactly as given (not trimmed), and the stream passes every piece straight through.
//
// Streaming: ToolCallStream runs the same one-pass, character-level recogniser that parse_tool_calls runs
// over the whole text (parse_tool_calls is feed(text) + finish()), so every split of a text into pieces gives
// the same content and calls, in the same order. feed() returns content as soon as it can no longer belong to
// a call and calls once final (see above): a hermes call at its "</tool_call>", the other formats' calls at
// finish(). Held back meanwhile: a possible marker prefix ("<tool_c", "[TOOL", "<|pyth"), trailing whitespace
// (until content follows it), and everything from a call's start. Holding only ASCII, the stream never splits
// a UTF-8 character that the pieces did not split. Work is linear in the text: depth and string state are
// tracked per character, and each call's JSON is parsed once, when it closes.
#include <string>
#include <string_view>
#include <vector>

#include "core/common/json.h"

namespace frost {

enum class ToolCallFormat {
  kNone,     // no tool calls are parsed: everything is content
  kJson,     // Llama 3.x: {"name": ..., "parameters": {...}} [; {...}], optionally after <|python_tag|>
  kHermes,   // Qwen 2.5 / Qwen3 / Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
  kMistral,  // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...], [TOOL_CALLS]name[ARGS]{...}, bare [...]
  kArguments,  // tool_choice {"function": {"name": N}}: the whole output is N's arguments object
  kCallList,   // tool_choice "required": the whole output is [{"name": ..., "parameters": {...}}, ...]
};

// "none", "json", "hermes", "mistral", "arguments", "call_list".
const char* tool_call_format_name(ToolCallFormat f);

// The format a chat template asks its model to write, from the template's Jinja source; the first rule that
// holds:
//   contains "<tool_call>"                              → kHermes (Qwen 2.5, Qwen3, Hermes)
//   contains "[TOOL_CALLS]"                             → kMistral (Mistral 7B v0.3, NeMo, Small)
//   contains "<|python_tag|>", or "ipython" and "parameters" → kJson (Llama 3.1 / 3.2 / 3.3)
//   contains "tools" (renders the tools, no marker)     → kJson (a generic bare-JSON call is the likeliest)
//   otherwise (the template never mentions tools)       → kNone
ToolCallFormat detect_tool_call_format(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // the arguments object as compact JSON text, members in the model's order

  bool operator==(const ToolCall& o) const { return name == o.name && arguments == o.arguments; }
};

struct ToolCallOutput {
  std::string content;          // the text that is not a tool call ("" when there is none)
  std::vector<ToolCall> calls;  // in output order
};

// The whole output text. `forced_name`: the function's name for kArguments (ignored otherwise).
ToolCallOutput parse_tool_calls(ToolCallFormat f, std::string_view text, std::string_view forced_name = "");

// The same, a piece at a time (see "Streaming" above). Not thread-safe; one per generated sequence. feed()
// after finish() returns nothing.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat f, std::string forced_name = "");

  struct Delta {
    std::string content;
    std::vector<ToolCall> calls;
  };
  Delta feed(std::string_view piece);
  Delta finish();

 private:
  enum class State {
    kRaw,          // everything from here on is content
    kStart,        // at the start of the output (only whitespace so far)
    kContent,      // hermes / mistral: content, watching for the marker
    kMarker,       // matching marker_ (mpos_ bytes matched so far)
    kMistralOpen,  // mistral: a "[" that is either "[TOOL_CALLS]" or a bare array
    kMistralHead,  // mistral: after "[TOOL_CALLS]"
    kMistralName,  // mistral: in the N of "N[ARGS]"
    kBeforeJson,   // whitespace before the call's "{" (after "<tool_call>", "<|python_tag|>", "[ARGS]")
    kJson,         // inside a call's JSON
    kAfterJson,    // hermes: whitespace before "</tool_call>"
    kBetween,      // json / mistral / arguments / call_list: after a call, before the next one or the end
  };
  enum class Miss { kRelease, kRawRelease, kBreak };        // what a marker mismatch does (see tool_calls.cc)
  enum class Unit { kCallObject, kCallArray, kArguments };  // what the JSON being scanned is

  void step(char c);
  void start_marker(const char* marker, char c, Miss miss, State after);
  void start_json(char open, Unit unit);
  void json_char(char c);
  void json_closed();
  void break_structure(char c);
  void emit_content(std::string_view s);
  void emit_content_char(char c);

  ToolCallFormat format_;
  std::string forced_name_;
  State state_;
  bool finished_ = false;
  // The current delta being built by feed() / finish().
  Delta out_;
  // Trimming: content has started (leading whitespace is dropped until then); whitespace awaiting content.
  bool content_started_ = false;
  std::string ws_held_;
  // Text held back since a call (or marker) started: released as content if the structure breaks.
  std::string held_;
  // Marker being matched.
  const char* marker_ = nullptr;
  size_t mpos_ = 0;
  Miss miss_ = Miss::kRelease;
  State after_marker_ = State::kRaw;
  // JSON being scanned: where it starts in held_, nesting, string state, what it must be.
  size_t json_start_ = 0;
  int depth_ = 0;
  JsonStringState strings_;  // where the call's JSON strings are
  bool expect_first_ = false;
  Unit unit_ = Unit::kCallObject;
  std::string mistral_name_;       // the N of "[TOOL_CALLS]N[ARGS]"
  std::vector<ToolCall> pending_;  // validated, not yet final (json / mistral / arguments / call_list)
};

}  // namespace frost
