#pragma once
// Chat-specific parts of the OpenAI API bodies (server/openai_api.h is the rest): messages as the chat
// template sees them, tools and tool_choice, the constraint that enforces a forced tool call, and tool calls
// in the response. Pure functions, unit tested in tests/unit/server/openai_chat_test.cc.
//
// Messages: role system | developer (→ system) | user | assistant | tool; content a string, null, or a list
// of
// {"type": "text", "text"} parts (joined into one string, as vLLM's "string" content format); name;
// assistant tool_calls [{id, type: "function", function: {name, arguments}}] whose arguments (JSON text, as
// OpenAI sends it) are parsed into an object for the template (vLLM does the same: templates write
// `arguments | tojson`; text that is not a JSON object is refused naming the field); tool's tool_call_id.
// Fields sent as null count as absent (the SDKs send nulls); any other field is refused naming it.
//
// Tools: tools [{type: "function", function: {name, description?, parameters?, strict?}}] (at most kMaxTools;
// names [A-Za-z0-9_.-]{1,64} and distinct), tool_choice "auto" (default with tools) | "none" | "required" |
// {type: "function", function: {name}}, parallel_tool_calls (default true). How each choice runs:
//   none      tools are still rendered (the model sees them, as vLLM), the output is plain content;
//   auto      the output is parsed in the template's format (core/model/tool_calls.h); malformed → content;
//   required  constrained decoding: the output is a JSON array of {"name": <a tool>, "parameters": <its
//   schema>}
//             (minItems 1; maxItems kMaxParallelCalls, or 1 when parallel_tool_calls is false), vLLM's choice
//             for forced calls — bare JSON rather than the family's markers, which are special tokens a
//             grammar over the vocabulary's text cannot emit;
//   named     constrained decoding: the output is the function's arguments object (its parameters schema).
// So with required / named, every call's arguments validate against the function's schema by construction
// (unless max_tokens cuts the output: finish_reason "length", the text comes back as content).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/tool_calls.h"
#include "nlohmann/json.hpp"

namespace frost::server::openai {

struct ApiError;
struct ConstraintRequest;

inline constexpr int kMaxTools = 128;
// Calls in one forced (`required`) output when parallel_tool_calls is true: bounded, so that a model that
// never closes the array cannot run to max_tokens on calls alone.
inline constexpr int kMaxParallelCalls = 8;
// Widest object accepted in messages / tools (they are re-read keeping member order, whose insert is linear).
inline constexpr size_t kMaxObjectMembers = 4096;

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ToolsRequest {
  nlohmann::ordered_json tools;  // the template's `tools` (null when none), member order as sent
  std::vector<std::string> names;
  ToolChoice choice = ToolChoice::kAuto;
  int named = -1;  // kNamed: the index into names
  bool parallel = true;
  bool any() const { return !names.empty(); }
};

// `messages` / `tools`: the body's values re-read in member order (ordered_span); `body` for errors only.
std::optional<ApiError> parse_chat_messages(const nlohmann::ordered_json& messages, size_t max_content_bytes,
                                            nlohmann::ordered_json* out);
std::optional<ApiError> parse_tools(const nlohmann::ordered_json* tools,
                                    const nlohmann::ordered_json* tool_choice,
                                    const nlohmann::ordered_json* parallel, ToolsRequest* out);

// Whether an object anywhere in `v` has more than kMaxObjectMembers members (iterative).
bool too_wide(const nlohmann::json& v);

// The body member `key` re-read as an ordered_json (member order kept), after checking that no object in
// `value` (the same member, parsed into the sorted json) is wider than kMaxObjectMembers. nullopt + *err on
// refusal.
std::optional<nlohmann::ordered_json> ordered_member(std::string_view body, const nlohmann::json& value,
                                                     const std::string& key, std::optional<ApiError>* err);

// The constraint a forced tool choice runs under (kNone for auto / none), with the field it names in errors.
ConstraintRequest tool_constraint(const ToolsRequest& t);

// How the output is parsed: `template_format` for auto, kCallList / kArguments for the forced choices.
ToolCallFormat output_format(const ToolsRequest& t, ToolCallFormat template_format);
// The function name a kArguments output belongs to ("" otherwise).
std::string forced_name(const ToolsRequest& t);

// A fresh tool call id: "call_" + 24 letters and digits; for the Mistral format 9 letters and digits (its
// templates refuse any other shape).
std::string new_tool_call_id(ToolCallFormat format);

// OpenAI's tool_calls array for `calls` (ids from `ids`, same length); streamed deltas carry "index" from
// `first_index` on.
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls, const std::vector<std::string>& ids,
                               bool with_index, int first_index = 0);

}  // namespace frost::server::openai
