#include "core/generate/sampling_params.h"

#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "core/common/field_error.h"
#include "core/common/utf8.h"

namespace frost {
namespace {

// Every refusal names its field as data too (core/common/field_error.h): "<field><subscript> <detail>".
absl::Status invalid(absl::string_view field, const std::string& detail, const std::string& subscript = "") {
  return invalid_field(field, detail, subscript);
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

absl::Status validate_penalty(const char* name, float v) {
  // NaN fails both comparisons, so it is rejected too.
  if (!(v >= -2.0f && v <= 2.0f)) {
    return invalid(name, absl::StrCat("must be in [-2, 2], got ", v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_sampling_params(const SamplingParams& p, int32_t vocab_size,
                                      const SamplingLimits& limits) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return invalid("temperature", absl::StrCat("must be finite and >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) return invalid("top_k", absl::StrCat("must be >= 0, got ", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return invalid("top_p", absl::StrCat("must be in (0, 1], got ", p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return invalid("min_p", absl::StrCat("must be in [0, 1], got ", p.min_p));
  }
  if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty)) {
    return invalid("repetition_penalty", absl::StrCat("must be finite and > 0, got ", p.repetition_penalty));
  }
  if (absl::Status s = validate_penalty("presence_penalty", p.presence_penalty); !s.ok()) return s;
  if (absl::Status s = validate_penalty("frequency_penalty", p.frequency_penalty); !s.ok()) {
    return s;
  }
  if (p.max_new_tokens <= 0 || p.max_new_tokens > limits.max_new_tokens) {
    return invalid("max_new_tokens",
                   absl::StrCat("must be in [1, ", limits.max_new_tokens, "], got ", p.max_new_tokens));
  }
  if (absl::Status s = validate_stop_strings(p.stop, limits); !s.ok()) return s;
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return invalid("stop_token_ids", absl::StrCat("must be in [0, ", vocab_size, "), got ", id),
                     absl::StrCat("[", i, "]"));
    }
  }
  if (p.logprobs < -1 || p.logprobs > limits.max_logprobs) {
    return invalid("logprobs", absl::StrCat("must be in [-1, ", limits.max_logprobs, "], got ", p.logprobs));
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
