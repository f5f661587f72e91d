// parse_model_config / load_model_config / validate_model_config.
#include "core/model/model_config.h"

#include <string>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>

#include "tests/testing/test_util.h"

namespace frost {
namespace {

using json = nlohmann::json;
using ::frost::testing::TempDir;
using ::frost::testing::write_text_file;

// stories260K's config.json (shared/models/stories260K), inlined so the test runs without it.
const char* const kStories260K = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512,
  "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 5,
  "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 8, "hidden_act": "silu",
  "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "rope_scaling": null, "attention_bias": false, "attention_dropout": 0.0, "mlp_bias": false,
  "tie_word_embeddings": true, "initializer_range": 0.02, "pretraining_tp": 1,
  "use_cache": true, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"})";

json llama_min() {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", 100},
              {"hidden_size", 32},
              {"intermediate_size", 48},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"max_position_embeddings", 64}};
}

json gpt2_min() {
  return json{{"architectures", {"GPT2LMHeadModel"}},
              {"vocab_size", 300},
              {"n_embd", 48},
              {"n_layer", 3},
              {"n_head", 6},
              {"n_positions", 128}};
}

absl::Status parse_status(const json& j) { return parse_model_config(j.dump()).status(); }

// ---- positive cases -------------------------------------------------------------------------

TEST(ModelConfigTest, ArchName) {
  EXPECT_STREQ(arch_name(Arch::kLlama), "llama");
  EXPECT_STREQ(arch_name(Arch::kGpt2), "gpt2");
}

TEST(ModelConfigTest, ParsesStories260K) {
  auto c = parse_model_config(kStories260K);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Arch::kLlama);
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->n_vocab, 512);
  EXPECT_EQ(c->dim, 64);
  EXPECT_EQ(c->n_layer, 5);
  EXPECT_EQ(c->n_head, 8);
  EXPECT_EQ(c->n_head_kv, 4);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->ffn_dim, 172);
  EXPECT_EQ(c->max_pos, 512);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->act, Activation::kSilu);
  EXPECT_EQ(c->bos_id, 1);
  EXPECT_EQ(c->eos_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c->q_dim(), 64);
  EXPECT_EQ(c->kv_dim(), 32);
  EXPECT_TRUE(validate_model_config(*c).ok());
}

TEST(ModelConfigTest, LoadsSharedStories260K) {
  FROST_REQUIRE_SHARED(cfg, "models/stories260K/config.json");
  auto c = load_model_config(frost::testing::shared_path("models/stories260K"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_head_kv, 4);
  EXPECT_EQ(c->ffn_dim, 172);
}

TEST(ModelConfigTest, LlamaDefaults) {
  auto c = parse_model_config(llama_min().dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_head_kv, 4);   // = num_attention_heads
  EXPECT_EQ(c->head_dim, 8);    // = hidden_size / num_attention_heads
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-6);  // LlamaConfig default
  EXPECT_FALSE(c->tie_embeddings);      // LlamaConfig default
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->mlp_bias);
  EXPECT_EQ(c->bos_id, -1);
  EXPECT_TRUE(c->eos_ids.empty());
}

TEST(ModelConfigTest, LlamaOptionalFields) {
  json j = llama_min();
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 16;  // != hidden / heads is allowed for LLaMA
  j["rope_theta"] = 500000.0;
  j["rms_norm_eps"] = 1e-5;
  j["tie_word_embeddings"] = true;
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["eos_token_id"] = {2, 7, 9};
  j["bos_token_id"] = 1;
  j["rope_scaling"] = nullptr;
  j["unknown_key"] = {{"nested", "ignored"}};
  auto c = parse_model_config(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->n_head_kv, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->q_dim(), 64);
  EXPECT_EQ(c->kv_dim(), 32);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->mlp_bias);
  EXPECT_EQ(c->eos_ids, (std::vector<int32_t>{2, 7, 9}));
}

TEST(ModelConfigTest, LlamaByModelType) {
  json j = llama_min();
  j.erase("architectures");
  j["model_type"] = "llama";
  auto c = parse_model_config(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Arch::kLlama);
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
}

TEST(ModelConfigTest, Gpt2) {
  json j = gpt2_min();
  j["n_inner"] = nullptr;
  j["bos_token_id"] = 299;
  j["eos_token_id"] = 299;
  auto c = parse_model_config(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Arch::kGpt2);
  EXPECT_EQ(c->architecture, "GPT2LMHeadModel");
  EXPECT_EQ(c->n_vocab, 300);
  EXPECT_EQ(c->dim, 48);
  EXPECT_EQ(c->n_layer, 3);
  EXPECT_EQ(c->n_head, 6);
  EXPECT_EQ(c->n_head_kv, 6);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->ffn_dim, 192);  // 4 * n_embd
  EXPECT_EQ(c->max_pos, 128);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->act, Activation::kGeluNew);
  EXPECT_EQ(c->bos_id, 299);
  EXPECT_EQ(c->eos_ids, std::vector<int32_t>{299});
}

TEST(ModelConfigTest, Gpt2ExplicitFieldsAndTanhGelu) {
  json j = gpt2_min();
  j["n_inner"] = 100;
  j["layer_norm_epsilon"] = 1e-6;
  j["activation_function"] = "gelu_pytorch_tanh";
  j["tie_word_embeddings"] = false;
  auto c = parse_model_config(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ffn_dim, 100);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-6);
  EXPECT_EQ(c->act, Activation::kGeluNew);
  EXPECT_FALSE(c->tie_embeddings);

  j.erase("architectures");
  j["model_type"] = "gpt2";
  c = parse_model_config(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, Arch::kGpt2);
}

// ---- rejections -----------------------------------------------------------------------------

TEST(ModelConfigTest, RejectsMalformedJson) {
  EXPECT_INVALID(parse_model_config("{not json").status(), "config.json: not valid JSON");
  EXPECT_INVALID(parse_model_config("").status(), "config.json: not valid JSON");
  EXPECT_INVALID(parse_model_config("{\"a\": 1} extra").status(), "config.json: not valid JSON");
  EXPECT_INVALID(parse_model_config("[1, 2]").status(), "config.json: top level must be a JSON object");
  EXPECT_INVALID(parse_model_config(std::string(200000, '[')).status(), "nests deeper");
}

TEST(ModelConfigTest, RejectsUnknownArchitecture) {
  json j = llama_min();
  j["architectures"] = {"BertModel"};
  EXPECT_INVALID(parse_status(j),
                 "config.json: unsupported architecture 'BertModel' (supported: LlamaForCausalLM, MistralForCausalLM, "
                 "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM, "
                 "GPT2LMHeadModel)");
  j.erase("architectures");
  j["model_type"] = "bert";
  EXPECT_INVALID(parse_status(j), "unsupported architecture (model_type 'bert')");
  j.erase("model_type");
  EXPECT_INVALID(parse_status(j), "config.json: architectures is missing");
  j["architectures"] = "LlamaForCausalLM";
  EXPECT_INVALID(parse_status(j), "config.json: architectures must be a list of strings");
}

TEST(ModelConfigTest, RejectsMissingRequiredFields) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "max_position_embeddings"}) {
    SCOPED_TRACE(field);
    json j = llama_min();
    j.erase(field);
    EXPECT_INVALID(parse_status(j), std::string("config.json: ") + field + " is missing");
    j[field] = nullptr;
    EXPECT_INVALID(parse_status(j), std::string("config.json: ") + field + " is missing");
  }
  for (const char* field : {"vocab_size", "n_embd", "n_layer", "n_head", "n_positions"}) {
    SCOPED_TRACE(field);
    json j = gpt2_min();
    j.erase(field);
    EXPECT_INVALID(parse_status(j), std::string("config.json: ") + field + " is missing");
  }
}

TEST(ModelConfigTest, RejectsWrongTypes) {
  json j = llama_min();
  j["hidden_size"] = "64";
  EXPECT_INVALID(parse_status(j), "config.json: hidden_size must be an integer, got \"64\"");
  j = llama_min();
  j["hidden_size"] = 32.0;
  EXPECT_INVALID(parse_status(j), "config.json: hidden_size must be an integer");
  j = llama_min();
  j["rms_norm_eps"] = "small";
  EXPECT_INVALID(parse_status(j), "config.json: rms_norm_eps must be a number");
  j = llama_min();
  j["tie_word_embeddings"] = 1;
  EXPECT_INVALID(parse_status(j), "config.json: tie_word_embeddings must be true or false");
  j = llama_min();
  j["hidden_act"] = 3;
  EXPECT_INVALID(parse_status(j), "config.json: hidden_act must be a string");
  j = llama_min();
  j["eos_token_id"] = "2";
  EXPECT_INVALID(parse_status(j), "config.json: eos_token_id must be a non-negative integer or a list");
  j["eos_token_id"] = {1, -2};
  EXPECT_INVALID(parse_status(j), "config.json: eos_token_id");
  j = llama_min();
  j["vocab_size"] = 18446744073709551615ull;
  EXPECT_INVALID(parse_status(j), "config.json: vocab_size is out of range");
}

TEST(ModelConfigTest, RejectsNonPositiveSizes) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "max_position_embeddings", "num_key_value_heads", "head_dim"}) {
    for (int v : {0, -3}) {
      SCOPED_TRACE(std::string(field) + "=" + std::to_string(v));
      json j = llama_min();
      j[field] = v;
      EXPECT_INVALID(parse_status(j),
                     std::string("config.json: ") + field + " must be positive, got " + std::to_string(v));
    }
  }
  json j = llama_min();
  j["num_attention_heads"] = 0;
  EXPECT_INVALID(parse_status(j), "config.json: num_attention_heads must be positive, got 0");
  j = gpt2_min();
  j["n_head"] = 0;
  EXPECT_INVALID(parse_status(j), "config.json: n_head must be positive, got 0");
  j = gpt2_min();
  j["n_inner"] = 0;
  EXPECT_INVALID(parse_status(j), "config.json: n_inner must be positive, got 0");
}

TEST(ModelConfigTest, RejectsAbsurdSizes) {
  json j = llama_min();
  j["vocab_size"] = (1 << 22) + 1;
  EXPECT_INVALID(parse_status(j), "config.json: vocab_size must be at most 4194304");
  j = llama_min();
  j["num_hidden_layers"] = 100000;
  EXPECT_INVALID(parse_status(j), "config.json: num_hidden_layers must be at most 1024");
  j = llama_min();
  j["hidden_size"] = 1 << 20;
  j["head_dim"] = 8;
  EXPECT_INVALID(parse_status(j), "config.json: hidden_size must be at most 65536");
  j = llama_min();
  j["max_position_embeddings"] = int64_t{1} << 40;
  EXPECT_INVALID(parse_status(j), "config.json: max_position_embeddings must be at most");
  j = llama_min();
  j["intermediate_size"] = int64_t{1} << 30;
  EXPECT_INVALID(parse_status(j), "config.json: intermediate_size must be at most");
  j = gpt2_min();
  j["n_positions"] = 1 << 21;
  EXPECT_INVALID(parse_status(j), "config.json: n_positions must be at most");
  // Found by tests/fuzz/model_config_fuzz.cc: GPT-2's n_inner default 4 * n_embd overflowed for a negative
  // n_embd, and mlp_ctx's default layer list enumerated an absurd n_layer before it was checked.
  j = gpt2_min();
  j["n_embd"] = int64_t{-9223372036854775807};
  EXPECT_INVALID(parse_status(j), "config.json: n_embd must be positive");
  j = gpt2_min();
  j["n_layer"] = int64_t{1} << 40;
  j["frost_variants"] = {{"mlp_ctx", {{"rank", 4}}}};
  EXPECT_INVALID(parse_status(j), "config.json: n_layer must be at most 1024");
}

TEST(ModelConfigTest, RejectsHeadsNotDividing) {
  json j = llama_min();
  j["num_attention_heads"] = 5;  // 32 % 5 != 0 and no head_dim
  EXPECT_INVALID(parse_status(j), "config.json: num_attention_heads (5) must divide hidden_size (32)");
  j = llama_min();
  j["num_attention_heads"] = 8;
  j["num_key_value_heads"] = 3;
  EXPECT_INVALID(parse_status(j), "config.json: num_key_value_heads (3) must divide num_attention_heads (8)");
  j = gpt2_min();
  j["n_head"] = 5;  // 48 % 5 != 0
  EXPECT_INVALID(parse_status(j), "config.json: n_head (5) must divide n_embd (48)");
  j = llama_min();
  j["head_dim"] = 7;
  EXPECT_INVALID(parse_status(j), "config.json: head_dim must be even for RoPE, got 7");
}

TEST(ModelConfigTest, RejectsUnsupportedFeatures) {
  json j = llama_min();
  j["hidden_act"] = "gelu";
  EXPECT_INVALID(parse_status(j), "config.json: hidden_act 'gelu' is unsupported");
  j = llama_min();
  j["rope_scaling"] = {{"type", "ntk-by-parts"}, {"factor", 2.0}};
  EXPECT_INVALID(parse_status(j), "config.json: rope_scaling: type 'ntk-by-parts' is unsupported");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}};
  EXPECT_INVALID(parse_status(j), "config.json: rope_scaling: factor must be a number >= 1, got 0.5");
  j = llama_min();
  j["sliding_window"] = 4096;
  EXPECT_INVALID(parse_status(j), "config.json: sliding_window is unsupported");
  j = gpt2_min();
  j["activation_function"] = "relu";
  EXPECT_INVALID(parse_status(j), "config.json: activation_function 'relu' is unsupported");
  j = gpt2_min();
  j["scale_attn_by_inverse_layer_idx"] = true;
  EXPECT_INVALID(parse_status(j), "config.json: scale_attn_by_inverse_layer_idx");
}

TEST(ModelConfigTest, RejectsBadNumbers) {
  json j = llama_min();
  j["rms_norm_eps"] = 0.0;
  EXPECT_INVALID(parse_status(j), "config.json: rms_norm_eps must be in (0, 1)");
  j = llama_min();
  j["rope_theta"] = -1.0;
  EXPECT_INVALID(parse_status(j), "config.json: rope_theta must be a positive number");
  j = gpt2_min();
  j["layer_norm_epsilon"] = 2.0;
  EXPECT_INVALID(parse_status(j), "config.json: layer_norm_epsilon must be in (0, 1)");
}

TEST(ModelConfigTest, RejectsTokenIdsOutsideVocab) {
  json j = llama_min();
  j["bos_token_id"] = 100;
  EXPECT_INVALID(parse_status(j), "config.json: bos_token_id (100) must be in [0, vocab_size = 100)");
  j = llama_min();
  j["eos_token_id"] = {2, 150};
  EXPECT_INVALID(parse_status(j), "config.json: eos_token_id (150)");
}

TEST(ModelConfigTest, ValidateBuiltConfigs) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.n_vocab = 64;
  c.dim = 16;
  c.n_layer = 1;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 4;
  c.ffn_dim = 32;
  c.max_pos = 16;
  EXPECT_TRUE(validate_model_config(c).ok()) << validate_model_config(c);
  ModelConfig bad = c;
  bad.n_head_kv = 0;
  EXPECT_INVALID(validate_model_config(bad), "num_key_value_heads must be positive");
  bad = c;
  bad.n_head_kv = 3;
  EXPECT_INVALID(validate_model_config(bad), "num_key_value_heads (3) must divide num_attention_heads (4)");
  bad = c;
  bad.arch = Arch::kGpt2;
  bad.act = Activation::kGeluNew;
  EXPECT_INVALID(validate_model_config(bad), "n_head");  // GPT-2 has no GQA
  bad = c;
  bad.window.assign(static_cast<size_t>(c.n_layer + 1), 4);  // one entry too many
  EXPECT_INVALID(validate_model_config(bad), absl::StrCat("sliding_window has ", c.n_layer + 1, " layer entries"));
}

TEST(ModelConfigTest, RandomCorruptionsNeverCrash) {
  const std::string good = kStories260K;
  uint64_t state = 0x2545F4914F6CDD1Dull;  // fixed seed
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const char kJsonish[] = "{}[]\",:0123456789-eE.tfn ";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = good;
    const int n_edits = 1 + static_cast<int>(next() % 3);
    for (int e = 0; e < n_edits && !t.empty(); ++e) {
      const size_t pos = next() % t.size();
      if (next() % 2) t[pos] = kJsonish[next() % (sizeof(kJsonish) - 1)];
      else t.erase(pos, 1 + next() % 4);
    }
    auto c = parse_model_config(t);
    if (!c.ok()) {
      ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
    } else {
      EXPECT_TRUE(validate_model_config(*c).ok());
    }
  }
}

TEST(ModelConfigTest, LoadFromDirectory) {
  TempDir dir;
  EXPECT_EQ(load_model_config(dir.path()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_MSG_HAS(load_model_config(dir.path()).status(), "config.json");
  const absl::Status missing_dir = load_model_config(dir.file("absent")).status();
  EXPECT_EQ(missing_dir.code(), absl::StatusCode::kNotFound);
  EXPECT_MSG_HAS(missing_dir, "absent");

  write_text_file(dir.file("config.json"), "{oops");
  const absl::Status s = load_model_config(dir.path()).status();
  EXPECT_INVALID(s, "not valid JSON");
  EXPECT_MSG_HAS(s, dir.file("config.json"));

  json j = llama_min();
  j.erase("hidden_size");
  write_text_file(dir.file("config.json"), j.dump(2));
  EXPECT_INVALID(load_model_config(dir.path()).status(), "config.json: hidden_size is missing");

  write_text_file(dir.file("config.json"), llama_min().dump(2));
  auto c = load_model_config(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dim, 32);

  write_text_file(dir.file("plain_file"), "x");
  EXPECT_INVALID(load_model_config(dir.file("plain_file")).status(), "not a directory");
}

// The weight formats: one list for the CLIs and the config, and where each runs. fp16 is a device format:
// every list names it, the CPU lists and check leave it out, naming the field and the value.
TEST(WeightDtypeTest, OneListAndWhereEachFormatRuns) {
  EXPECT_EQ(weight_dtype_choices(), "fp32, bf16, fp16, int8, int4 or w8a8");
  EXPECT_EQ(weight_dtype_choices(false), "fp32, bf16, int8, int4 or w8a8");
  EXPECT_EQ(weight_dtype_choices(true), "fp32, bf16, fp16 or int8");
  for (WeightDtype d : kWeightDtypes) {
    WeightDtype back = WeightDtype::kW8A8;
    ASSERT_TRUE(parse_weight_dtype(weight_dtype_name(d), &back)) << weight_dtype_name(d);
    EXPECT_EQ(back, d);
    EXPECT_EQ(check_weight_dtype_on_cpu(d, "model.dtype").ok(), weight_dtype_on_cpu(d));
  }
  WeightDtype f16 = WeightDtype::kF32;
  ASSERT_TRUE(parse_weight_dtype("fp16", &f16));
  EXPECT_EQ(f16, WeightDtype::kF16);
  EXPECT_FALSE(weight_dtype_on_cpu(WeightDtype::kF16));
  EXPECT_TRUE(weight_dtype_on_device(WeightDtype::kF16));
  EXPECT_TRUE(weight_dtype_on_device(WeightDtype::kInt8));
  EXPECT_FALSE(weight_dtype_on_device(WeightDtype::kInt4));
  EXPECT_FALSE(weight_dtype_on_device(WeightDtype::kW8A8));
  EXPECT_FALSE(parse_weight_dtype("float16", &f16));
  EXPECT_INVALID(
      check_weight_dtype_on_cpu(WeightDtype::kF16, "--dtype"),
      "--dtype fp16: fp16 is a device weight format (model.device cuda or reference); the CPU serves fp32, "
      "bf16, int8, int4 or w8a8");
}

}  // namespace
}  // namespace frost
