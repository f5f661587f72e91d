// The families' config.json fields (core/model/model_families.cc) as the real checkpoints write them (dimensions
// shrunk): what each turns on, HF's defaults where a field is left out, and refusals that name the field. The
// RoPE tables (core/model/rope.h) of each scaling type against their definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "core/model/layer_sequence.h"
#include "core/model/model_config.h"
#include "core/model/rope.h"

namespace frost {
namespace {

using json = nlohmann::json;

json base(const char* arch, const char* type) {
  return json{{"architectures", {arch}}, {"model_type", type}, {"vocab_size", 300}, {"hidden_size", 64},
              {"intermediate_size", 128}, {"num_hidden_layers", 6}, {"num_attention_heads", 4},
              {"num_key_value_heads", 2}, {"max_position_embeddings", 64}};
}

ModelConfig parse_ok(const json& j) {
  absl::StatusOr<ModelConfig> c = parse_model_config(j.dump());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig();
}

std::string parse_error(const json& j) {
  absl::StatusOr<ModelConfig> c = parse_model_config(j.dump());
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ModelFamilies, Llama32WithLlama3RopeScaling) {
  json j = base("LlamaForCausalLM", "llama");
  j["rope_theta"] = 500000.0;
  j["tie_word_embeddings"] = true;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.family, Family::kLlama);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLlama3);
  EXPECT_EQ(c.rope_scaling.original_max_pos, 8192);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_FALSE(c.plain());
  j["rope_scaling"].erase("low_freq_factor");
  EXPECT_NE(parse_error(j).find("rope_scaling: low_freq_factor is missing"), std::string::npos);
}

TEST(ModelFamilies, Qwen25BiasesQkvButNotO) {
  json j = base("Qwen2ForCausalLM", "qwen2");
  j["tie_word_embeddings"] = true;
  j["use_sliding_window"] = false;
  j["sliding_window"] = 32768;
  j["max_window_layers"] = 21;
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.family, Family::kQwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.any_window());  // use_sliding_window false
  j["use_sliding_window"] = true;
  j["sliding_window"] = 8;
  j["max_window_layers"] = 4;
  const ModelConfig w = parse_ok(j);
  EXPECT_EQ(w.window, (std::vector<int64_t>{0, 0, 0, 0, 8, 8}));
}

TEST(ModelFamilies, Qwen3HeadDimAndQkNorm) {
  json j = base("Qwen3ForCausalLM", "qwen3");
  j["head_dim"] = 32;
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  j.erase("head_dim");
  EXPECT_EQ(parse_ok(j).head_dim, 128);  // Qwen3Config's default, not hidden / heads
}

TEST(ModelFamilies, MistralSlidesEveryLayer) {
  json j = base("MistralForCausalLM", "mistral");
  j["sliding_window"] = 8;
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.window, std::vector<int64_t>(6, 8));
  j["sliding_window"] = nullptr;
  EXPECT_FALSE(parse_ok(j).any_window());
  j["sliding_window"] = 4096;  // longer than the context: no window
  EXPECT_FALSE(parse_ok(j).any_window());
}

TEST(ModelFamilies, Gemma2DefaultsAndExplicitNulls) {
  json j = base("Gemma2ForCausalLM", "gemma2");
  j["head_dim"] = 16;
  j["query_pre_attn_scalar"] = 24;
  j["sliding_window"] = 8;
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.window, (std::vector<int64_t>{8, 0, 8, 0, 8, 0}));  // layer 0 slides
  EXPECT_DOUBLE_EQ(c.attn_softcap, 50.0);                          // Gemma2Config's defaults
  EXPECT_DOUBLE_EQ(c.final_softcap, 30.0);
  EXPECT_DOUBLE_EQ(c.embed_scale, 8.0);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 1.0 / std::sqrt(24.0));
  EXPECT_EQ(c.act, Activation::kGeluNew);
  EXPECT_TRUE(c.post_norms);
  EXPECT_TRUE(c.tie_embeddings);
  j["final_logit_softcapping"] = nullptr;  // explicit null: off
  EXPECT_DOUBLE_EQ(parse_ok(j).final_softcap, 0.0);
  j["hidden_activation"] = "relu";
  EXPECT_NE(parse_error(j).find("hidden_activation 'relu' is unsupported"), std::string::npos);
}

TEST(ModelFamilies, Gemma3LocalGlobalPatternAndLocalRope) {
  json j = base("Gemma3ForCausalLM", "gemma3_text");
  j["head_dim"] = 16;
  j["sliding_window"] = 8;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.window, (std::vector<int64_t>{8, 8, 8, 8, 8, 0}));  // sliding_window_pattern 6
  EXPECT_DOUBLE_EQ(c.rope_local_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.local_rope(0));
  EXPECT_FALSE(c.local_rope(5));
  EXPECT_TRUE(c.qk_norm);
  EXPECT_DOUBLE_EQ(c.attn_softcap, 0.0);
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention",
                      "sliding_attention", "full_attention"};
  EXPECT_EQ(parse_ok(j).window, (std::vector<int64_t>{8, 0, 8, 0, 8, 0}));
  j["layer_types"][1] = "chunked_attention";
  EXPECT_NE(parse_error(j).find("layer_types entry 1 \"chunked_attention\" is unsupported"), std::string::npos);
}

TEST(ModelFamilies, Phi3LongRopeAndPartialRotary) {
  json j = base("Phi3ForCausalLM", "phi3");
  j["max_position_embeddings"] = 64;
  j["original_max_position_embeddings"] = 16;
  j["sliding_window"] = 262144;
  j["partial_rotary_factor"] = 0.75;
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", json::array()}, {"long_factor", json::array()}};
  for (int i = 0; i < 6; ++i) {  // rotary_dim = 0.75 × 16 = 12 → 6 factors
    j["rope_scaling"]["short_factor"].push_back(1.0 + i * 0.1);
    j["rope_scaling"]["long_factor"].push_back(2.0 + i);
  }
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.family, Family::kPhi3);
  EXPECT_EQ(c.rot_dim(), 12);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_pos, 16);
  EXPECT_FALSE(c.any_window());
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  j["rope_scaling"]["long_factor"].erase(0);
  EXPECT_NE(parse_error(j).find("long_factor must be a list of rotary_dim / 2 = 6 numbers"), std::string::npos);
  j["partial_rotary_factor"] = 0.7;  // 11.2 → 11 dims: odd
  EXPECT_NE(parse_error(j).find("partial_rotary_factor"), std::string::npos);
}

TEST(ModelFamilies, WhatFrostDoesNotServeIsRefusedNamingTheField) {
  json moe = base("MixtralForCausalLM", "mixtral");
  moe["num_local_experts"] = 8;
  EXPECT_NE(parse_error(moe).find("num_local_experts 8: mixture-of-experts layers are unsupported"), std::string::npos);
  json vision = base("Gemma3ForConditionalGeneration", "gemma3");
  vision["vision_config"] = {{"hidden_size", 1152}};
  EXPECT_NE(parse_error(vision).find("vision_config is present"), std::string::npos);
  json rope = base("LlamaForCausalLM", "llama");
  rope["rope_scaling"] = {{"rope_type", "mrope"}};
  EXPECT_NE(parse_error(rope).find("rope_scaling: rope_type 'mrope' is unsupported"), std::string::npos);
  json smol3 = base("SmolLM3ForCausalLM", "smollm3");
  EXPECT_NE(parse_error(smol3).find("unsupported architecture 'SmolLM3ForCausalLM'"), std::string::npos);
}

TEST(ModelFamilies, ABackendWithoutTheFamiliesOpsRefusesNamingTheField) {
  json j = base("MistralForCausalLM", "mistral");
  j["sliding_window"] = 8;
  const ModelConfig c = parse_ok(j);
  const absl::Status st = check_layer_features(c, LayerFeatures{}, "model.device reference", "runs only on cpu");
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("sliding-window attention (config.json sliding_window)"), std::string::npos) << st;
  EXPECT_TRUE(check_layer_features(c, LayerFeatures::all(), "cpu", "").ok());
  EXPECT_TRUE(check_layer_features(parse_ok(base("LlamaForCausalLM", "llama")), LayerFeatures{}, "d", "").ok());
}

// ---- RoPE tables ----

TEST(RopeTables, Llama3KeepsHighFrequenciesAndDividesLowOnes) {
  RopeScaling s;
  s.type = RopeType::kLlama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_pos = 64;
  const RopeTable plain = make_rope_table(500000, RopeScaling{}, 16, 32, 128);
  const RopeTable scaled = make_rope_table(500000, s, 16, 32, 128);
  // inv_freq[j] = 500000^(−2j/16): wavelengths 2π·500000^(2j/16). j = 0, 1 are shorter than 64 / 4 = 16 (kept),
  // j >= 3 longer than 64 (divided by 8), j = 2 (≈ 43) in between.
  const int64_t p = 5;
  for (int64_t j = 0; j < 8; ++j) {
    const double inv = std::pow(500000.0, -2.0 * j / 16);
    const double wavelen = 2 * M_PI / inv;
    const double want = wavelen < 16 ? inv : wavelen > 64 ? inv / 8 : -1;
    if (want < 0) {
      EXPECT_NE(scaled.cos[p][j].item<float>(), plain.cos[p][j].item<float>());
      continue;
    }
    EXPECT_NEAR(scaled.cos[p][j].item<float>(), std::cos(p * want), 1e-5) << "j " << j;
  }
}

TEST(RopeTables, LongRopeSwitchesFactorsAtTheOriginalContextAndScales) {
  RopeScaling s;
  s.type = RopeType::kLongRope;
  s.factor = 0;  // derived: 64 / 16 = 4
  s.original_max_pos = 16;
  s.short_factor = {1, 1, 1, 1};
  s.long_factor = {2, 3, 4, 5};
  const RopeTable t = make_rope_table(10000, s, 8, 64, 64);
  const double attention = std::sqrt(1 + std::log(4.0) / std::log(16.0));
  for (int64_t p : {3, 15, 16, 40})
    for (int64_t j = 0; j < 4; ++j) {
      const double ext = p < 16 ? 1.0 : static_cast<double>(s.long_factor[static_cast<size_t>(j)]);
      const double inv = 1.0 / (ext * std::pow(10000.0, 2.0 * j / 8));
      EXPECT_NEAR(t.cos[p][j].item<float>(), std::cos(p * inv) * attention, 1e-5) << "p " << p << " j " << j;
      EXPECT_NEAR(t.sin[p][j].item<float>(), std::sin(p * inv) * attention, 1e-5) << "p " << p << " j " << j;
    }
}

TEST(RopeTables, LinearDividesEveryFrequencyAndYarnScalesTheAttention) {
  RopeScaling lin;
  lin.type = RopeType::kLinear;
  lin.factor = 2;
  const RopeTable t = make_rope_table(10000, lin, 8, 16, 16);
  EXPECT_NEAR(t.cos[6][1].item<float>(), std::cos(6 * std::pow(10000.0, -2.0 / 8) / 2), 1e-6);
  RopeScaling yarn;
  yarn.type = RopeType::kYarn;
  yarn.factor = 4;
  yarn.original_max_pos = 16;
  const RopeTable y = make_rope_table(10000, yarn, 8, 64, 64);
  const double mscale = 0.1 * std::log(4.0) + 1.0;
  EXPECT_NEAR(y.cos[0][0].item<float>(), mscale, 1e-6);  // position 0: cos 1 × the attention factor
  EXPECT_NEAR(y.cos[1][0].item<float>(), std::cos(1.0) * mscale, 1e-6);  // j = 0: extrapolated (kept)
}

}  // namespace
}  // namespace frost
