#pragma once
// The proto edge of frost.v1.Generation: request decode and validation (GenerateRequest → GenerationRequest,
// the Tokenize text check) and response encode (token chunks, the final message, ModelInfo). Pure functions,
// no gRPC: GenerationService (server/generation_service.h) calls them on its threads, the unit tests
// directly.
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/generate/engine.h"
#include "core/generate/request.h"
#include "frost/v1/generation.pb.h"
#include "server/server_config.h"

namespace frost::server {

// Longest request_id accepted, in bytes.
inline constexpr size_t kMaxRequestIdBytes = 128;
// Most token ids in a token_ids prompt, whatever the config (limits.max_prompt_tokens, when set, is lower;
// the engine then refuses what does not fit the context).
inline constexpr int kMaxPromptTokenIds = 1 << 20;

// Edge validation and conversion of a GenerateRequest: the checks that need no model (prompt presence, byte
// limit, UTF-8, request_id, logprobs sign, KV codec name), then the proto's optional fields over the engine
// defaults. Sampling ranges, token limits and the context check run in Engine::submit (still before any model
// work). INVALID_ARGUMENT names the proto field and the value.
// `defaults`: the sampling a request starts from (the served checkpoint's generation_config.json,
// sampling_defaults()); a field the request sets wins.
absl::StatusOr<GenerationRequest> to_generation_request(const v1::GenerateRequest& req,
                                                        const LimitsSection& limits,
                                                        const SamplingParams& defaults = SamplingParams());

// The fields of frost.v1.SamplingParams that to_generation_request reads by hand; every other one is the row
// of sampling_params_table() (core/generate/sampling_params.h) of the same name, read through reflection, so
// a new sampling knob is its SamplingParams member, its row and its proto field, no codec code. The mapping
// test (tests/unit/server/generation_request_test.cc) checks both ways that nothing else is left out.
const std::vector<std::string>& sampling_fields_by_hand();

// A prompt text (Generate's and Tokenize's `text`): not empty, within limits.max_prompt_bytes, valid UTF-8;
// INVALID_ARGUMENT naming `field` otherwise.
absl::Status check_prompt_text(const std::string& field, const std::string& text,
                               const LimitsSection& limits);

// Appends one engine token event to a chunk (text delta, id, and the logprobs when the request asked for
// them).
void append_token(const TokenEvent& ev, bool with_logprobs, v1::TokenChunk* chunk);

// The stream's last message for a generation that completed (or was ended by a drain).
v1::GenerateResponse final_message(const GenerationResult& r);

// The GenerateRequest fields that the engine's canonical request fields (core/generate/request.h) stand for
// in one request: its prompt's field and its constraint's.
struct RequestFields {
  std::string prompt = "text";          // text | token_ids | messages
  std::string constraint = "sampling";  // sampling.json_schema | ... | a chat request's forced tool call's
};
// `constraint_field`: a chat request's forced tool call's field (GrpcChat::constraint_field); "" = none.
RequestFields request_fields(const v1::GenerateRequest& req, const std::string& constraint_field = "");

// An engine status as the client's: when it carries its field (core/common/field_error.h), the message
// becomes
// "<the GenerateRequest field><subscript>: <detail>" ("sampling.top_p: must be in (0, 1], got 2",
// "sampling.json_schema: ..."), code kept. A status without a field passes unchanged.
absl::Status name_request_field(const absl::Status& st, const RequestFields& fields);

// GetModelInfo's answer for the served engine.
v1::ModelInfo model_info(const Engine& e, const ServerConfig& cfg);

}  // namespace frost::server
