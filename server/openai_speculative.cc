#include "server/openai_speculative.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace frost::server::openai {

using json = nlohmann::json;

std::optional<ApiError> parse_speculative(const json* value, SpecMethod* method, int32_t* num_tokens) {
  *method = SpecMethod::kServer;
  *num_tokens = 0;
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (!value->is_object())
    return bad_request("speculative",
                       absl::StrCat("speculative: expected an object, got ", json_kind(*value)));
  for (auto it = value->begin(); it != value->end(); ++it) {
    if (it.key() != "method" && it.key() != "num_tokens")
      return bad_request("speculative." + utf8_for_json(it.key()),
                         absl::StrCat("speculative.", utf8_for_json(it.key()),
                                      ": unknown field (expected method, num_tokens)"));
  }
  if (auto it = value->find("method"); it != value->end() && !it->is_null()) {
    if (!it->is_string())
      return bad_request("speculative.method",
                         absl::StrCat("speculative.method: expected a string, got ", json_kind(*it)));
    const std::string m = it->get<std::string>();
    // "server" is not offered: leaving the field out says the same, and a body that names a method gets it.
    if (m == "off") {
      *method = SpecMethod::kOff;
    } else if (m == "ngram") {
      *method = SpecMethod::kNgram;
    } else if (m == "suffix") {
      *method = SpecMethod::kSuffix;
    } else {
      return bad_request("speculative.method",
                         absl::StrCat("speculative.method: unknown value \"", utf8_for_json(m),
                                      "\" (expected off|ngram|suffix)"));
    }
  }
  if (auto it = value->find("num_tokens"); it != value->end() && !it->is_null()) {
    // An integer (2.0 too, as JSON writers may send it), >= 0; the engine clamps it to the server's k, so any
    // value up to int32 is carried rather than refused here.
    const bool integral = it->is_number_integer() ||
                          (it->is_number_float() && std::trunc(it->get<double>()) == it->get<double>());
    if (!integral)
      return bad_request("speculative.num_tokens",
                         absl::StrCat("speculative.num_tokens: expected an integer, got ",
                                      it->is_number() ? it->dump() : std::string(json_kind(*it))));
    const double v = it->get<double>();
    if (v < 0)
      return bad_request("speculative.num_tokens",
                         absl::StrCat("speculative.num_tokens: must be >= 0, got ", it->dump()));
    if (v > 2147483647.0)
      return bad_request("speculative.num_tokens",
                         absl::StrCat("speculative.num_tokens: out of range, got ", it->dump()));
    *num_tokens = static_cast<int32_t>(v);
  }
  return std::nullopt;
}

void add_speculation_usage(const std::vector<ChoiceState>& choices, json* usage) {
  int64_t drafted = 0, accepted = 0;
  for (const ChoiceState& c : choices) {
    if (!c.result) continue;
    drafted += c.result->n_draft_tokens;
    accepted += c.result->n_accepted_tokens;
  }
  if (drafted == 0) return;
  (*usage)["completion_tokens_details"] = {{"accepted_prediction_tokens", accepted},
                                           {"rejected_prediction_tokens", drafted - accepted}};
}

}  // namespace frost::server::openai
