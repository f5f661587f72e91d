#pragma once
// Speculative decoding on the OpenAI-compatible API (issue 52): frost's extension object in a request body,
//   "speculative": {"method": "off" | "ngram" | "suffix", "num_tokens": N}
// (/v1/completions, /v1/chat/completions, and /v1/responses, which reads its chat translation), and what it
// did in `usage`, under OpenAI's own names for predicted tokens:
//   "completion_tokens_details": {"accepted_prediction_tokens": A, "rejected_prediction_tokens": D - A}
// Kept apart from openai_api.cc so the main parser stays within the file-size limit.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/generate/spec_options.h"
#include "nlohmann/json.hpp"
#include "server/openai_api.h"

namespace frost::server::openai {

// `value`: the body's "speculative" member (nullptr or JSON null: not given, the server's default). Writes
// the method (kServer when "method" is absent) and num_tokens (0 when absent: the server's k; the engine
// clamps a larger one to engine.speculative.num_tokens). A 400 naming the field ("speculative.num_tokens")
// otherwise.
std::optional<ApiError> parse_speculative(const nlohmann::json* value, SpecMethod* method,
                                          int32_t* num_tokens);

// Adds completion_tokens_details to `usage` when any choice speculated (drafted tokens > 0); a request that
// did not speculate keeps OpenAI's three usage fields only, as before.
void add_speculation_usage(const std::vector<ChoiceState>& choices, nlohmann::json* usage);

}  // namespace frost::server::openai
