#pragma once
// The repository's stories260K and its golden, as the tests that check a decoder or an engine against them
// use both: the checkpoint in the source tree (models/stories260K) and the reference Hugging Face's
// transformers computed for it (../shared/models/stories260K/reference.json: prompts, their ids, the greedy
// continuation and the top-20 logits at the last prompt position).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/model/model_loader.h"

namespace frost::testing {

// models/stories260K loaded with `options`; on an error, a test failure naming it and nullptr (so a caller
// writes `ASSERT_TRUE(m)`).
std::shared_ptr<const LoadedModel> load_stories260k(const LoadOptions& options = {});

// One case of the golden.
struct GoldenCase {
  std::string prompt;
  std::vector<int32_t> input_ids;                               // BOS included, as fed to the model
  std::vector<int32_t> greedy_new_ids;                          // the greedy continuation
  std::vector<std::pair<int64_t, double>> top20_last_position;  // (token, logit) at the last prompt position
};
// The cases of a reference.json (its path from FROST_REQUIRE_SHARED, which skips the test when it is absent).
std::vector<GoldenCase> golden_cases(const std::string& reference_json);

}  // namespace frost::testing
