#include "tests/testing/stories260k.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/testing/test_util.h"

namespace frost::testing {

std::shared_ptr<const LoadedModel> load_stories260k(const LoadOptions& options) {
  auto loaded = load_model(source_path("models/stories260K"), options);
  if (!loaded.ok()) {
    ADD_FAILURE() << "models/stories260K: " << loaded.status();
    return nullptr;
  }
  return std::shared_ptr<const LoadedModel>(std::move(loaded).value());
}

std::vector<GoldenCase> golden_cases(const std::string& reference_json) {
  const nlohmann::json golden = nlohmann::json::parse(read_text_file(reference_json));
  std::vector<GoldenCase> cases;
  for (const nlohmann::json& c : golden.at("cases")) {
    GoldenCase g;
    g.prompt = c.at("prompt").get<std::string>();
    g.input_ids = c.at("input_ids").get<std::vector<int32_t>>();
    g.greedy_new_ids = c.at("greedy_new_ids").get<std::vector<int32_t>>();
    for (const nlohmann::json& e : c.at("top20_last_position"))
      g.top20_last_position.emplace_back(e[0].get<int64_t>(), e[1].get<double>());
    cases.push_back(std::move(g));
  }
  return cases;
}

}  // namespace frost::testing
