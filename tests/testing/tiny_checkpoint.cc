#include "tests/testing/tiny_checkpoint.h"

#include <nlohmann/json.hpp>

namespace frost::testing {
namespace {

constexpr int64_t C = 16, H = 4, Hkv = 2, D = 4, F = 24, L = 2;

}  // namespace

at::Tensor tiny_param(std::vector<int64_t> shape, int64_t salt, double scale) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return ((at::arange(n, at::kFloat) * 0.37 + static_cast<double>(salt)).sin() * scale).reshape(shape);
}

nlohmann::ordered_json tiny_llama_config(int64_t vocab, int64_t max_pos) {
  return nlohmann::ordered_json{{"architectures", {"LlamaForCausalLM"}},
                                {"model_type", "llama"},
                                {"vocab_size", vocab},
                                {"hidden_size", C},
                                {"intermediate_size", F},
                                {"num_hidden_layers", L},
                                {"num_attention_heads", H},
                                {"num_key_value_heads", Hkv},
                                {"head_dim", D},
                                {"hidden_act", "silu"},
                                {"max_position_embeddings", max_pos},
                                {"rms_norm_eps", 1e-5},
                                {"rope_theta", 10000.0},
                                {"tie_word_embeddings", true},
                                {"bos_token_id", 1},
                                {"eos_token_id", 2}};
}

std::string tiny_llama_config_json(int64_t vocab) { return tiny_llama_config(vocab).dump(2); }

NamedTensors tiny_llama_tensors(int64_t vocab, at::ScalarType dtype, double scale, bool with_lm_head) {
  NamedTensors ts;
  int64_t salt = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    ts.emplace_back(name, tiny_param(shape, ++salt, scale).to(dtype));
  };
  add("model.embed_tokens.weight", {vocab, C});
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {C});
    add(p + "self_attn.q_proj.weight", {H * D, C});
    add(p + "self_attn.k_proj.weight", {Hkv * D, C});
    add(p + "self_attn.v_proj.weight", {Hkv * D, C});
    add(p + "self_attn.o_proj.weight", {C, H * D});
    add(p + "post_attention_layernorm.weight", {C});
    add(p + "mlp.gate_proj.weight", {F, C});
    add(p + "mlp.up_proj.weight", {F, C});
    add(p + "mlp.down_proj.weight", {C, F});
  }
  add("model.norm.weight", {C});
  if (with_lm_head) add("lm_head.weight", {vocab, C});
  return ts;
}

std::string ascii_tokenizer_json() {
  using ojson = nlohmann::ordered_json;
  ojson vocab = ojson::object();
  for (int b = 33; b <= 126; ++b) vocab[std::string(1, static_cast<char>(b))] = b - 33;
  ojson tok{{"version", "1.0"},
            {"added_tokens", ojson::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"post_processor", nullptr},
            {"decoder", nullptr},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", ojson::array()}}}};
  return tok.dump();
}

}  // namespace frost::testing
