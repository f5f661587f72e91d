#pragma once
// The OpenAI body's sampling fields: the rows of sampling_params_table() (core/generate/sampling_params.h),
// each read from the body under its own name by the table, with OpenAI's differences declared as data in one
// place (body_fields() in openai_sampling.cc: the body's other names, its narrower ranges, its "off" values).
// A new row is read from the body with no code here (docs/architecture.md, "Worked example: adding a
// config field, a flag or a request field").
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/generate/sampling_params.h"
#include "nlohmann/json.hpp"
#include "server/openai_api.h"
#include "server/server_config.h"

namespace frost::server::openai {

// The body's keys that set a sampling row at `ep` (a row's own name or its OpenAI names): parse_request's
// known fields include them.
std::vector<std::string> sampling_body_keys(Endpoint ep);

// The rows the body names by a key of their own that the caller reads (logprobs: an integer for
// completions, a boolean with top_logprobs for chat).
const std::vector<std::string>& sampling_rows_by_hand();

// Reads every sampling row `body` sets into `p` (null = not given: OpenAI's SDKs send nulls); `given` gets
// the rows that were set. A refused value is a 400 whose param is the body's key and whose message is the
// table's ("top_p: must be in (0, 1], got 1.5"; "temperature: must be in [0, 2], got 3").
std::optional<ApiError> read_sampling(Endpoint ep, const nlohmann::json& body, const LimitsSection& limits,
                                      SamplingParams* p, std::set<std::string>* given);

}  // namespace frost::server::openai
