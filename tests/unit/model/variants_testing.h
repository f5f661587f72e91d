#pragma once
// Random variant models for the variants tests (variants_paths_test.cc, variants_config_test.cc,
// variants_loader_test.cc): a builtin base with a VariantConfig, its random weights, and the variant configs
// the tests share.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/builtin_models.h"
#include "core/model/model_config.h"
#include "core/model/transformer.h"
#include "core/model/variants.h"
#include "tests/testing/test_util.h"

namespace frost::variants_testing {

inline constexpr uint64_t kSeed = 0xC0FFEE;

inline ModelConfig make_config(const std::string& base, bool mha, const VariantConfig& v) {
  ModelConfig c = *builtin_config(base);
  if (mha) c.n_head_kv = c.n_head;
  c.variants = v;
  const absl::Status st = validate_model_config(c);
  EXPECT_TRUE(st.ok()) << st;
  return c;
}

inline std::unique_ptr<Transformer> make_model(const ModelConfig& c, at::ScalarType wd = at::kFloat) {
  return std::make_unique<Transformer>(c, random_weights(c, kSeed, wd));
}

inline std::vector<int64_t> tokens(int64_t n, int64_t vocab) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back((i * 53 + 7) % vocab);
  return t;
}

inline VariantConfig ra(std::vector<int64_t> l) {
  VariantConfig v;
  v.ra_layers = std::move(l);
  return v;
}
inline VariantConfig sba(std::vector<int64_t> l, double alpha) {
  VariantConfig v;
  v.sba_layers = std::move(l);
  v.sba_alpha = alpha;
  return v;
}
inline VariantConfig router(std::vector<int64_t> l, int64_t ra_heads, int64_t hidden,
                            std::vector<int64_t> ra_l = {}) {
  VariantConfig v;
  v.router_layers = std::move(l);
  v.router_ra_heads = ra_heads;
  v.router_hidden = hidden;
  v.ra_layers = std::move(ra_l);
  return v;
}
inline VariantConfig mlp_ctx(int64_t rank, bool conductor) {
  VariantConfig v;
  v.mlp_ctx_layers = {0, 1};
  v.mlp_ctx_rank = rank;
  v.mlp_ctx_conductor = conductor;
  return v;
}
inline VariantConfig all_of_them() {
  VariantConfig v = mlp_ctx(4, true);
  v.ra_layers = {0};
  v.sba_layers = {1};
  v.sba_alpha = 0.5;
  v.router_layers = {0, 1};
  v.router_ra_heads = 2;
  v.router_hidden = 16;
  return v;
}

// Small HF config.json objects of each architecture (the config and loader tests add frost_variants).
inline nlohmann::ordered_json gpt2_json() {
  using ojson = nlohmann::ordered_json;
  return ojson{{"architectures", {"GPT2LMHeadModel"}},
               {"model_type", "gpt2"},
               {"vocab_size", 512},
               {"n_embd", 64},
               {"n_layer", 2},
               {"n_head", 4},
               {"n_positions", 512},
               {"tie_word_embeddings", false}};
}
inline nlohmann::ordered_json llama_json(int64_t kv_heads) {
  using ojson = nlohmann::ordered_json;
  return ojson{{"architectures", {"LlamaForCausalLM"}},
               {"vocab_size", 512},
               {"hidden_size", 64},
               {"intermediate_size", 172},
               {"num_hidden_layers", 2},
               {"num_attention_heads", 4},
               {"num_key_value_heads", kv_heads},
               {"max_position_embeddings", 512}};
}

}  // namespace frost::variants_testing
