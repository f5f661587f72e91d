#include "core/generate/sampling_params.h"

#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "core/common/utf8.h"

namespace frost {
namespace {

absl::Status invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// The first problem with the stop strings, or OK.
absl::Status validate_stop_strings(const std::vector<std::string>& stop,
                                   const SamplingLimits& limits) {
  if (stop.size() > static_cast<size_t>(limits.max_stop_strings)) {
    return invalid(absl::StrCat("stop must have at most ", limits.max_stop_strings,
                                " strings, got ", stop.size()));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    const std::string& s = stop[i];
    if (s.empty()) return invalid(absl::StrCat("stop[", i, "] must not be empty"));
    if (s.size() > static_cast<size_t>(limits.max_stop_bytes)) {
      return invalid(absl::StrCat("stop[", i, "] must be at most ", limits.max_stop_bytes,
                                  " bytes, got ", s.size()));
    }
    if (!is_valid_utf8(s)) return invalid(absl::StrCat("stop[", i, "] must be valid UTF-8"));
  }
  return absl::OkStatus();
}

absl::Status validate_penalty(const char* name, float v) {
  // NaN fails both comparisons, so it is rejected too.
  if (!(v >= -2.0f && v <= 2.0f)) {
    return invalid(absl::StrCat(name, " must be in [-2, 2], got ", v));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_sampling_params(const SamplingParams& p, int32_t vocab_size,
                                      const SamplingLimits& limits) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return invalid(absl::StrCat("temperature must be finite and >= 0, got ", p.temperature));
  }
  if (p.top_k < 0) return invalid(absl::StrCat("top_k must be >= 0, got ", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return invalid(absl::StrCat("top_p must be in (0, 1], got ", p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return invalid(absl::StrCat("min_p must be in [0, 1], got ", p.min_p));
  }
  if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty)) {
    return invalid(
        absl::StrCat("repetition_penalty must be finite and > 0, got ", p.repetition_penalty));
  }
  if (absl::Status s = validate_penalty("presence_penalty", p.presence_penalty); !s.ok()) return s;
  if (absl::Status s = validate_penalty("frequency_penalty", p.frequency_penalty); !s.ok()) {
    return s;
  }
  if (p.max_new_tokens <= 0 || p.max_new_tokens > limits.max_new_tokens) {
    return invalid(absl::StrCat("max_new_tokens must be in [1, ", limits.max_new_tokens, "], got ",
                                p.max_new_tokens));
  }
  if (absl::Status s = validate_stop_strings(p.stop, limits); !s.ok()) return s;
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int32_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return invalid(
          absl::StrCat("stop_token_ids[", i, "] must be in [0, ", vocab_size, "), got ", id));
    }
  }
  if (p.logprobs < -1 || p.logprobs > limits.max_logprobs) {
    return invalid(
        absl::StrCat("logprobs must be in [-1, ", limits.max_logprobs, "], got ", p.logprobs));
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
