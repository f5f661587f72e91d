#include "core/generate/sampling_params.h"

#include <cmath>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"
#include "core/common/field_error.h"
#include "core/common/utf8.h"

namespace frost {
namespace {

// Every refusal names its field as data too (core/common/field_error.h), in the table's format:
// "<field><subscript>: <detail>" ("top_p: must be in (0, 1], got 1.5", "stop[1]: must not be empty").
absl::Status invalid(absl::string_view field, const std::string& detail, const std::string& subscript = "") {
  return with_field(absl::InvalidArgumentError(absl::StrCat(field, subscript, ": ", detail)),
                    FieldError{std::string(field), subscript, detail});
}

// The first problem with the stop strings, or OK.
absl::Status validate_stop_strings(const std::vector<std::string>& stop,
                                   const SamplingLimits& limits) {
  if (stop.size() > static_cast<size_t>(limits.max_stop_strings)) {
    return invalid(
        "stop", absl::StrCat("must have at most ", limits.max_stop_strings, " strings, got ", stop.size()));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    const std::string& s = stop[i];
    const std::string at = absl::StrCat("[", i, "]");
    if (s.empty()) return invalid("stop", "must not be empty", at);
    if (s.size() > static_cast<size_t>(limits.max_stop_bytes)) {
      return invalid("stop",
                     absl::StrCat("must be at most ", limits.max_stop_bytes, " bytes, got ", s.size()), at);
    }
    if (!is_valid_utf8(s)) return invalid("stop", "must be valid UTF-8", at);
  }
  return absl::OkStatus();
}

// The ranges of the plain fields, declared once in the table's rows (validate_sampling_params checks through
// them; the caps of max_new_tokens and logprobs narrow these two).
const ConfigRange kTemperature = ConfigRange::at_least(0);  // and finite
const ConfigRange kTopK = ConfigRange::at_least(0);
const ConfigRange kTopP = ConfigRange::in_lo_open(0, 1);
const ConfigRange kMinP = ConfigRange::in(0, 1);
const ConfigRange kRepetitionPenalty = ConfigRange::above(0);  // and finite
const ConfigRange kPenalty = ConfigRange::in(-2, 2);           // presence and frequency
const ConfigRange kMaxNewTokens = ConfigRange::at_least(1);    // up to SamplingLimits::max_new_tokens
const ConfigRange kLogprobs = ConfigRange::at_least(-1);       // up to SamplingLimits::max_logprobs

}  // namespace

const ConfigTable<SamplingParams>& sampling_params_table() {
  using S = SamplingParams;
  static const ConfigTable<S> t(
      "",
      {number_field<S>("temperature", &S::temperature, kTemperature)
           .doc("sampling temperature, dividing the logits; 0 = greedy"),
       int_field<S>("top_k", &S::top_k, kTopK).doc("sample among the K most likely tokens; 0 = off"),
       number_field<S>("top_p", &S::top_p, kTopP)
           .doc("nucleus: keep the smallest set of most likely tokens with mass >= P; 1 = off"),
       number_field<S>("min_p", &S::min_p, kMinP)
           .doc("drop tokens less likely than P times the most likely one; 0 = off"),
       number_field<S>("repetition_penalty", &S::repetition_penalty, kRepetitionPenalty)
           .doc("a seen token's positive logit is divided by it, a negative one multiplied; 1 = off"),
       number_field<S>("presence_penalty", &S::presence_penalty, kPenalty)
           .doc("subtracted from the logit of each token generated so far; 0 = off"),
       number_field<S>("frequency_penalty", &S::frequency_penalty, kPenalty)
           .doc("subtracted from a token's logit once per time it was generated; 0 = off"),
       optional_field<S>(&S::seed, int_field<uint64_t>("seed", self())
                                       .doc("the same seed, params and logits give the same tokens; unset = "
                                            "a nondeterministic seed")),
       int_field<S>("max_new_tokens", &S::max_new_tokens, kMaxNewTokens).doc("tokens to generate at most"),
       bool_field<S>("ignore_eos", &S::ignore_eos).doc("keep generating after EOS"),
       int_field<S>("logprobs", &S::logprobs, kLogprobs)
           .doc("-1 = none, 0 = the sampled token's, N = also the N most likely alternatives")},
      FieldStyle::kPath);
  return t;
}

absl::Status validate_sampling_params(const SamplingParams& p, int32_t vocab_size,
                                      const SamplingLimits& limits) {
  // The plain fields through the table's rows: its ranges and its words, with the server's caps narrowing
  // two of them (SamplingLimits: max_new_tokens in [1, max_new_tokens], logprobs in [-1, max_logprobs]).
  const ConfigTable<SamplingParams>& table = sampling_params_table();
  const std::pair<const char*, std::pair<ConfigRange, int32_t>> capped[] = {
      {"max_new_tokens", {ConfigRange::in(kMaxNewTokens.lo, limits.max_new_tokens), p.max_new_tokens}},
      {"logprobs", {ConfigRange::in(kLogprobs.lo, limits.max_logprobs), p.logprobs}}};
  for (const ConfigField<SamplingParams>& row : table.fields()) {
    for (const auto& [name, cap] : capped) {
      if (row.name == name && !cap.first.contains(cap.second))
        return invalid(name, absl::StrCat(cap.first.describe(), ", got ", cap.second));
    }
    if (absl::Status s = table.check_field(p, row); !s.ok()) {
      // The table's message is "<row>: <detail>"; the detail is the field error's.
      return invalid(row.name, std::string(s.message().substr(row.name.size() + 2)));
    }
  }
  if (absl::Status s = validate_stop_strings(p.stop, limits); !s.ok()) return s;
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return invalid("stop_token_ids", absl::StrCat("must be in [0, ", vocab_size, "), got ", id),
                     absl::StrCat("[", i, "]"));
    }
  }
  return absl::OkStatus();
}

SamplingParams sampling_defaults(const GenerationDefaults& g) {
  SamplingParams p;
  if (g.temperature) p.temperature = *g.temperature;
  if (g.top_p) p.top_p = *g.top_p;
  if (g.top_k) p.top_k = *g.top_k;
  if (g.repetition_penalty) p.repetition_penalty = *g.repetition_penalty;
  if (g.do_sample && !*g.do_sample) p.temperature = 0.0f;
  return p;
}

}  // namespace frost
