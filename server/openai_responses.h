#pragma once
// POST /v1/responses — OpenAI's Responses API, the stateless subset — as a mapping onto the chat path: the
// body is translated into the equivalent /v1/chat/completions body and parsed by parse_request(kChat)
// (openai_api.h), so messages, tools, forced tool calls and JSON Schema constraints run exactly as chat runs
// them (one parser, one set of limits and checks); errors come back with the Responses field names
// (responses_field()). The engine's output is written in the Responses shapes (ResponsesOutput: items, SSE
// events). Pure functions, no I/O; the handler is server/http_responses.cc, tests
// tests/unit/server/openai_responses_test.cc.
//
// Why a chat body rather than a ParsedRequest built directly: parse_request owns the defaults (sampling from
// the checkpoint, chat's max_tokens), the ranges, the constraint and tool checks and the order-keeping
// re-read of a JSON Schema; going through it keeps /v1/responses and /v1/chat/completions equal by
// construction.
//
// Request fields served: model; input (a string = one user message, or items: messages {type?: "message",
// role: user | assistant | system | developer, content: a string or input_text / output_text parts},
// {type: "function_call", call_id, name, arguments} (consecutive calls, and calls right after an assistant
// message, become one assistant message with tool_calls), {type: "function_call_output", call_id, output}
// (a tool message)); instructions (a leading system message); tools [{type: "function", name, description,
// parameters, strict}]; tool_choice "auto" | "none" | "required" | {type: "function", name};
// parallel_tool_calls; text.format {type: "text" | "json_object" | "json_schema", name, schema, strict,
// description} (text.verbosity accepted, ignored); max_output_tokens; temperature; top_p; stream; seed
// (frost's extension, as on chat). Accepted and ignored: metadata (echoed), user, safety_identifier,
// prompt_cache_key, stream_options.include_obfuscation, truncation "disabled", service_tier "auto" /
// "default", reasoning with no member set, include entries that name outputs frost never produces,
// top_logprobs 0, max_tool_calls null. store: absent, false or true are accepted and nothing is ever stored;
// the response says "store": false. Refused (400 naming the field): previous_response_id and conversation
// (frost keeps no state: send the whole conversation in input), background: true, prompt, item_reference /
// reasoning / other item types, non-text content parts, non-function tools, truncation "auto", reasoning
// effort / summary, include "message.output_text.logprobs", and any unknown field.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/generate/request.h"
#include "core/model/tool_calls.h"
#include "nlohmann/json.hpp"
#include "server/openai_api.h"
#include "server/server_config.h"

namespace frost::server::openai {

// A Responses body translated: the chat body it stands for, where each chat message came from (for errors),
// and the request fields the response object echoes.
struct ResponsesTranslation {
  nlohmann::ordered_json chat_body;
  std::vector<std::string> message_origin;  // per chat message: "instructions" or "input[i]" (or "input")
  nlohmann::ordered_json echo;  // instructions, tools, tool_choice, parallel_tool_calls, text, ...
};
std::variant<ResponsesTranslation, ApiError> responses_to_chat(std::string_view body);

// A chat field path (as parse_request and the engine name them) as the Responses body names it:
// "response_format.json_schema.schema" → "text.format.schema", "tools[2].function.parameters" →
// "tools[2].parameters", "tool_choice.function.name" → "tool_choice.name", "max_completion_tokens" /
// "max_tokens" → "max_output_tokens", "messages" / "prompt" → "input", "messages[k]…" → message_origin[k].
std::string responses_field(std::string_view chat_field, const std::vector<std::string>& message_origin);
// `e` with its param and message in the Responses names.
ApiError responses_error(ApiError e, const std::vector<std::string>& message_origin);

struct ResponsesRequest {
  ParsedRequest chat;  // endpoint kChat, n 1; chat.constraint.field in the Responses names
  std::vector<std::string> message_origin;
  nlohmann::ordered_json echo;
};
std::variant<ResponsesRequest, ApiError> parse_responses_request(
    std::string_view body, const LimitsSection& limits, const SamplingParams& defaults = SamplingParams());

// "resp_" / "msg_" / "fc_" + 24 letters and digits.
std::string new_response_id(std::string_view prefix);

// The response's output as it accumulates, whole or streamed: the generated text is fed through a
// ToolCallStream (core/model/tool_calls.h) one character at a time, so the items and their order (a message
// item where its first content appeared, a function_call item per call as the parser releases it) depend only
// on the text, never on how it was split into batches: streamed and whole responses are equal. Every call to
// feed() / finish() appends the streaming events it produced to *events (pass null when not streaming),
// without sequence_number (ResponsesEvents adds it).
class ResponsesOutput {
 public:
  struct Item {
    bool is_call = false;
    std::string id;                        // "msg_…" / "fc_…"
    std::string text;                      // message
    std::string call_id, name, arguments;  // function_call
  };
  ResponsesOutput(ToolCallFormat format, std::string forced_name,
                  ToolCallFormat id_format = ToolCallFormat::kHermes);
  void feed(std::string_view text, std::vector<nlohmann::ordered_json>* events);
  // The end of the output: what the parser still held, then the message item closed ("incomplete" when the
  // output was cut). An output with neither text nor calls gets an empty message item.
  void finish(bool incomplete, std::vector<nlohmann::ordered_json>* events);
  const std::vector<Item>& items() const { return items_; }
  nlohmann::ordered_json output_json() const;  // the response's "output" array
  std::string output_text() const;             // the message text ("" when none)

 private:
  void content(const std::string& s, std::vector<nlohmann::ordered_json>* events);
  void flush_delta(std::vector<nlohmann::ordered_json>* events);
  void call(const ToolCall& c, std::vector<nlohmann::ordered_json>* events);
  void apply(ToolCallStream::Delta d, std::vector<nlohmann::ordered_json>* events);
  nlohmann::ordered_json item_json(size_t i) const;

  ToolCallFormat format_;
  ToolCallStream parser_;
  ToolCallFormat id_format_;
  std::vector<Item> items_;
  int message_ = -1;           // index of the message item, -1 before any content
  std::string pending_delta_;  // message text not yet sent as a delta
  bool finished_ = false, incomplete_ = false;
};

// What a Responses object says beyond its output.
struct ResponseStatus {
  std::string status = "completed";  // "in_progress" | "completed" | "incomplete" | "failed"
  bool incomplete_length = false;    // incomplete_details {reason: "max_output_tokens"}
  std::optional<ApiError> error;     // status "failed"
  bool has_usage = false;
  int64_t input_tokens = 0, output_tokens = 0;
};
// The response object (`out` null: output [] and output_text "").
nlohmann::ordered_json response_object(const ResponseMeta& meta, const nlohmann::ordered_json& echo,
                                       const ResponseStatus& st, const ResponsesOutput* out);

// Server-sent events of one response, numbered from 0: "event: <type>\ndata: <json>\n\n".
class ResponsesEvents {
 public:
  std::string frame(nlohmann::ordered_json ev);
  std::string frame_all(std::vector<nlohmann::ordered_json>* evs);  // frames each, then clears *evs
  // {type, response}: response.created / in_progress / completed / incomplete / failed.
  static nlohmann::ordered_json lifecycle(const char* type, nlohmann::ordered_json response);

 private:
  int64_t seq_ = 0;
};

}  // namespace frost::server::openai
