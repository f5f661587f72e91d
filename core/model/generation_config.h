#pragma once
// generation_config.json: what a checkpoint's authors ship as its generation defaults (transformers'
// GenerationConfig). Read at load (load_model) and kept on the LoadedModel:
//   - eos_token_id (an integer or a list): stop tokens, added to config.json's (Llama-3 instruct models end
//     their turns with <|eot_id|>, listed only here);
//   - do_sample, temperature, top_p, top_k, repetition_penalty: the sampling a request gets for each of these it
//     leaves unset (core/generate/sampling_params.h sampling_defaults()). do_sample false means greedy.
// Every other key (pad_token_id, max_length, transformers_version, ...) is ignored. The file is optional.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace frost {

inline constexpr const char* kGenerationConfigName = "generation_config.json";

struct GenerationDefaults {
  std::vector<int32_t> eos_ids;  // as listed (may repeat config.json's)
  std::optional<bool> do_sample;
  std::optional<float> temperature;  // >= 0
  std::optional<float> top_p;        // (0, 1]
  std::optional<int32_t> top_k;      // >= 0, 0 = off
  std::optional<float> repetition_penalty;  // > 0
  bool any_sampling() const { return do_sample || temperature || top_p || top_k || repetition_penalty; }
};

// Parses generation_config.json text. INVALID_ARGUMENT "<label>: <field> ..." naming the field and its value for
// a wrong type or range; an eos id must lie in [0, n_vocab) (the model's embedding rows).
absl::StatusOr<GenerationDefaults> parse_generation_config(const std::string& text, const std::string& label,
                                                           int64_t n_vocab);

// <dir>/generation_config.json, or empty defaults when the file is absent.
absl::StatusOr<GenerationDefaults> load_generation_config(const std::string& dir, int64_t n_vocab);

}  // namespace frost
