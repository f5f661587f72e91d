#pragma once
// Per-request sampling parameters (OpenAI / vLLM names and meanings) and their validation.
// Every default means "off": a default-constructed SamplingParams samples from the plain
// softmax of the model logits with a nondeterministic seed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/model/generation_config.h"

namespace frost {

template <typename C>
class ConfigTable;  // core/common/config_fields.h

struct SamplingParams {
  // Logits are divided by this before truncation; 0 = greedy (argmax, ties → lowest id).
  float temperature = 1.0f;
  // Keep only the k most likely tokens; 0 = off. k >= vocab_size is the same as off.
  int32_t top_k = 0;
  // Nucleus: keep the smallest set of most likely tokens whose mass is >= top_p; 1 = off.
  float top_p = 1.0f;
  // Drop tokens whose probability is < min_p * (probability of the most likely token); 0 = off.
  float min_p = 0.0f;
  // Hugging Face semantics, over prompt + generated tokens (each distinct token once):
  // a positive logit is divided by the penalty, a negative one multiplied. 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI semantics, over generated tokens only:
  // logit -= presence_penalty * (count > 0) + frequency_penalty * count. 0 = off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Unset: a nondeterministic seed. Set: the same seed, params, vocabulary and logits give
  // the same tokens on every run and platform (see sampler.h).
  std::optional<uint64_t> seed;
  int32_t max_new_tokens = 256;
  // Generation stops when the text contains one of these; the stop string is not returned.
  std::vector<std::string> stop;
  // Generation stops when one of these ids is sampled (in addition to EOS).
  std::vector<int32_t> stop_token_ids;
  // Keep generating after EOS (stop_token_ids still stop).
  bool ignore_eos = false;
  // -1 = no logprobs; 0 = only the sampled token's logprob; n > 0 = also the n most likely
  // alternatives.
  int32_t logprobs = -1;
};

// Server-side caps on what a request may ask for (from server config; these are defaults).
struct SamplingLimits {
  int32_t max_new_tokens = 4096;
  int32_t max_stop_strings = 16;
  int32_t max_stop_bytes = 256;  // per stop string
  int32_t max_logprobs = 20;
};

// The plain-valued fields of SamplingParams (all but stop and stop_token_ids), declared once: name, member,
// range, doc (core/common/config_fields.h). Every reader of a request's sampling goes through its rows: the
// gRPC codec (server/generation_codec.cc, by proto field name), the OpenAI body (server/openai_sampling.cc,
// OpenAI's differences as data there), frost-bench's flags (core/flags/table_flags.h); and
// validate_sampling_params checks through them (max_new_tokens and logprobs also have the server's upper
// limits, SamplingLimits). Messages in the path style: "top_k: must be >= 0, got -1".
const ConfigTable<SamplingParams>& sampling_params_table();

// OK, or INVALID_ARGUMENT naming the first offending field and its value in the table's format, e.g.
// "top_p: must be in (0, 1], got 1.5", "stop[1]: must not be empty"; the field also as data
// (core/common/field_error.h). `vocab_size` bounds stop_token_ids.
absl::Status validate_sampling_params(const SamplingParams& params, int32_t vocab_size,
                                      const SamplingLimits& limits = SamplingLimits());

// The sampling a request starts from, before its own fields: SamplingParams' defaults with a checkpoint's
// generation_config.json over them (temperature, top_p, top_k, repetition_penalty as given; do_sample false =
// greedy, temperature 0, whatever temperature says; do_sample absent = the values as given, as vLLM reads them).
// A request field that is set always wins. An empty GenerationDefaults gives SamplingParams().
SamplingParams sampling_defaults(const GenerationDefaults& g);

}  // namespace frost
