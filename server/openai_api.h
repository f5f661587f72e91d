#pragma once
// The OpenAI-compatible HTTP API's bodies: request JSON → what the engine runs, and the engine's events →
// OpenAI's response objects (server/http_server.h is the transport). No I/O here, so every mapping is unit
// tested without a socket (tests/unit/server/openai_api_test.cc).
//
// Endpoints and fields (OpenAI's names and defaults; what frost adds is marked):
//   POST /v1/completions       model, prompt (a string, [string] — a batch of prompts —, [token ids] or
//                              [[token ids]]), max_tokens (default 16, as OpenAI), temperature, top_p, n, stream,
//                              stream_options.include_usage, seed, stop (string or list), logprobs
//                              (0..limits.max_logprobs), presence_penalty, frequency_penalty, user; echo and suffix
//                              refused (400) unless false / empty.
//   POST /v1/chat/completions  model, messages (openai_chat.h: roles, content strings or text parts, tool_calls,
//                              tool results), tools, tool_choice, parallel_tool_calls, max_tokens /
//                              max_completion_tokens (default: the context's remainder), temperature, top_p, n,
//                              stream, stream_options, seed, stop, logprobs (bool) + top_logprobs, presence_penalty,
//                              frequency_penalty, user, and vLLM's chat_template_kwargs, add_generation_prompt.
//   Both: response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema",
//   "strict"}} (constrained decoding, core/constrain/constraint.h), and vLLM's extensions top_k, min_p,
//   repetition_penalty, ignore_eos, guided_json, guided_regex, guided_grammar (GBNF), at most one constraint
//   (a forced tool call is one too); and frost's speculative {"method", "num_tokens"} (speculative decoding,
//   openai_speculative.h), whose effect usage reports as completion_tokens_details.accepted_prediction_tokens
//   / rejected_prediction_tokens (present only when the request speculated).
// Anything else in the body is refused with a 400 naming the field (OpenAI does the same for unknown
// parameters), so a misspelt option never silently does nothing. Every error is OpenAI's error object:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "<field>", "code": null}}.
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "core/generate/request.h"
#include "core/model/chat_template.h"
#include "nlohmann/json.hpp"
#include "server/openai_chat.h"
#include "server/server_config.h"

namespace frost::server::openai {

enum class Endpoint { kCompletions, kChat };

struct ApiError {
  int http = 400;
  std::string message;
  std::string param;  // the body field at fault; "" = none (null)
  std::string type = "invalid_request_error";
  std::string code;  // OpenAI's error code ("model_not_found", ...); "" = null
};
// {"error": {...}} as OpenAI writes it.
std::string error_body(const ApiError& e);
// A 400 naming `param` (the body field at fault).
ApiError bad_request(std::string param, std::string message);
// nullopt when `asked` names the served model (its name, or the configured model.path); else OpenAI's 404
// model_not_found naming both.
std::optional<ApiError> check_model(const std::string& asked, const std::string& served_name,
                                    const std::string& configured_path);
// What a JSON value is, for messages ("expected a string, got an integer"); nlohmann::json or ordered_json.
template <typename J>
const char* json_kind(const J& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "a value";
}
// A core/engine status as the API error a client expects: INVALID_ARGUMENT / FAILED_PRECONDITION /
// OUT_OF_RANGE 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404, RESOURCE_EXHAUSTED 429,
// UNAVAILABLE 503, DEADLINE_EXCEEDED 504, anything else 500. `param`: the field when the caller knows it.
ApiError error_from_status(const absl::Status& st, const std::string& param = "");
// The gRPC code an HTTP status stands for (frost_requests_total{protocol="http"} uses gRPC's code names).
int grpc_code_for_http(int http);

// Which constrained-decoding form the body asked for, with the field it came from (for error messages).
struct ConstraintRequest {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kGrammar };
  Kind kind = Kind::kNone;
  std::string text;   // the schema (JSON text), regex or grammar
  std::string field;  // "response_format.json_schema.schema", "guided_regex", ...
};

// One completions prompt: text, or token ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<PromptInput> prompts;        // completions: one or more (a batch: choices are prompt-major)
  nlohmann::ordered_json messages;         // chat: as the template sees them (openai_chat.h)
  nlohmann::ordered_json template_kwargs;  // chat_template_kwargs (vLLM's): null or an object
  ToolsRequest tools;                      // chat
  SamplingParams params;
  bool max_tokens_set = false;  // chat without max_tokens: the context's remainder (set at submit)
  bool add_generation_prompt = true;  // chat (vLLM's extension): end the prompt with the assistant's header
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  // return logprobs (completions: logprobs set; chat: logprobs true)
  ConstraintRequest constraint;
  // frost's extension "speculative" {"method", "num_tokens"} (openai_speculative.h); kServer, 0: the server's.
  SpecMethod spec_method = SpecMethod::kServer;
  int32_t spec_num_tokens = 0;
};

// Parses and checks a body for `ep`. Limits: prompt bytes and UTF-8 (limits.max_prompt_bytes), stop strings,
// logprobs, n <= kMaxChoices, messages <= kMaxMessages. Ranges the engine owns (temperature, top_p, ...) are
// checked at submit and come back as 400s naming the engine's field, mapped to the body's name here
// (engine_error(), from the field the status carries: core/common/field_error.h).
inline constexpr int kMaxChoices = 16;
// A batched completions request: prompts at most, and prompts x n at most (each is one engine request).
inline constexpr int kMaxPrompts = 64;
inline constexpr int kMaxBatchChoices = 256;
inline constexpr int kMaxMessages = 1024;
// Nesting of objects and arrays in a request body, refused while parsing (before anything recursive runs):
// a JSON Schema may nest 256 levels of its own (core/constrain/json_schema.cc) inside response_format.
inline constexpr int kMaxRequestJsonDepth = 300;
// `defaults`: the sampling a request starts from (the served checkpoint's generation_config.json,
// sampling_defaults()); a field the body sets wins.
// `extra_fields`: body members the caller reads itself (the tokenize endpoint's), skipped here.
std::variant<ParsedRequest, ApiError> parse_request(Endpoint ep, std::string_view body, const LimitsSection& limits,
                                                    const SamplingParams& defaults = SamplingParams(),
                                                    const std::set<std::string>* extra_fields = nullptr);

// The body's name for an engine's canonical request field (core/generate/request.h, carried by the status:
// core/common/field_error.h): "max_new_tokens" → "max_tokens", "prompt" → "messages" for chat,
// "constraint" → `constraint_field` (the member the body's constraint came from: "response_format...",
// "guided_regex", "tools"); "" when the body has no such field (kv.codec).
std::string body_field(Endpoint ep, std::string_view canonical, const std::string& constraint_field);
// An engine status as the API error: when it carries its field, param is the body's name for it and the
// message
// "<body field><subscript>: <detail>" (a prompt's token position keeps the engine's sentence); otherwise the
// status as it is (error_from_status).
ApiError engine_error(Endpoint ep, const absl::Status& st, const std::string& constraint_field);

// ---- responses

// One choice's output as it accumulates.
struct ChoiceState {
  int prompt_index = 0;  // which prompt of a batched completions request
  std::string text;
  std::vector<TokenEvent> events;  // with logprobs only
  std::optional<GenerationResult> result;
  // Chat with tools: the calls parsed from the output (`text` is then the content outside them) and their ids.
  std::vector<ToolCall> calls;
  std::vector<std::string> call_ids;
};

// Token text for logprobs (the token's bytes; invalid UTF-8 replaced) and its raw bytes.
using TokenText = std::function<std::string(int32_t id)>;

// OpenAI's finish_reason: "stop" (EOS, a stop string or token, a completed constraint), "length", and for a
// request cut by a deadline or a drain "length" too (what clients expect: the output is incomplete).
const char* finish_reason(FinishReason r);

struct ResponseMeta {
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// The whole (non-streamed) response.
nlohmann::json full_response(Endpoint ep, const ResponseMeta& meta, const std::vector<ChoiceState>& choices,
                             bool logprobs, const TokenText& token_text);
// One streamed chunk carrying `events` of choice `index` (chat: the first chunk of a choice also carries
// role "assistant"); `finish` set on the choice's last chunk.
nlohmann::json stream_chunk(Endpoint ep, const ResponseMeta& meta, int index, const std::vector<TokenEvent>& events,
                            bool first, const std::optional<FinishReason>& finish, bool logprobs,
                            const TokenText& token_text);
// A streamed chat chunk of a choice whose output is parsed for tool calls: `content` (omitted when empty, except
// on the first chunk) and `calls` (delta.tool_calls, "index" counted per choice from `first_call_index`), with
// the logprobs of `events`; `finish` on the choice's last chunk ("tool_calls" when `had_calls`).
nlohmann::json tool_stream_chunk(const ResponseMeta& meta, int index, const std::vector<TokenEvent>& events,
                                 bool first, const std::string& content, const std::vector<ToolCall>& calls,
                                 const std::vector<std::string>& call_ids, int first_call_index,
                                 const std::optional<FinishReason>& finish, bool had_calls, bool logprobs,
                                 const TokenText& token_text);
// The usage-only chunk (stream_options.include_usage): choices [] and usage over every choice.
nlohmann::json usage_chunk(Endpoint ep, const ResponseMeta& meta, const std::vector<ChoiceState>& choices);
nlohmann::json usage_of(const std::vector<ChoiceState>& choices);

// GET /v1/models.
nlohmann::json models_response(const std::string& model, int64_t created);

// Valid UTF-8 for JSON (a token may end inside a character): core/common/utf8.h sanitize_utf8, the detokenizer's
// rule (each maximal invalid subpart, and a truncated tail, becomes one U+FFFD).
std::string utf8_for_json(std::string_view bytes);

}  // namespace frost::server::openai
