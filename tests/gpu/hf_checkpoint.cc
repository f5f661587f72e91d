#include "tests/gpu/hf_checkpoint.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "kernels/cuda/reference.h"

namespace frost::cuda::testing {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

HfCheckpoint load_hf_llama(const std::string& dir) {
  HfCheckpoint ck;
  const nlohmann::json cfg = nlohmann::json::parse(read_file(dir + "/config.json"));
  if (cfg.value("model_type", "") != "llama")
    throw std::runtime_error(dir + "/config.json: model_type must be llama, got " +
                             cfg.value("model_type", "?"));
  ModelSpec& s = ck.spec;
  s.arch = Arch::kLlama;
  s.n_vocab = cfg.at("vocab_size");
  s.dim = cfg.at("hidden_size");
  s.n_layer = cfg.at("num_hidden_layers");
  s.n_head = cfg.at("num_attention_heads");
  s.n_head_kv = cfg.value("num_key_value_heads", s.n_head);
  s.head_dim = cfg.value("head_dim", s.dim / s.n_head);
  s.ffn_dim = cfg.at("intermediate_size");
  s.max_pos = cfg.at("max_position_embeddings");
  s.norm_eps = cfg.value("rms_norm_eps", 1e-5f);
  s.rope_theta = cfg.value("rope_theta", 10000.0);
  s.tie_embeddings = cfg.value("tie_word_embeddings", false);

  const std::string path = dir + "/model.safetensors";
  const std::string blob = read_file(path);
  if (blob.size() < 8) throw std::runtime_error(path + ": shorter than its header length");
  uint64_t hlen = 0;
  std::memcpy(&hlen, blob.data(), 8);
  if (hlen > blob.size() - 8)
    throw std::runtime_error(path + ": header length " + std::to_string(hlen) + " past the end");
  const nlohmann::json header = nlohmann::json::parse(blob.substr(8, hlen));
  const char* data = blob.data() + 8 + hlen;
  const uint64_t data_len = blob.size() - 8 - hlen;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string dtype = t.at("dtype");
    const uint64_t b0 = t.at("data_offsets")[0], b1 = t.at("data_offsets")[1];
    if (b0 > b1 || b1 > data_len)
      throw std::runtime_error(path + ": tensor " + name + " has offsets past the data");
    std::vector<float> v;
    if (dtype == "F32") {
      v.resize((b1 - b0) / 4);
      std::memcpy(v.data(), data + b0, v.size() * 4);
    } else if (dtype == "F16" || dtype == "BF16") {
      v.resize((b1 - b0) / 2);
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, data + b0 + 2 * i, 2);
        v[i] = dtype == "F16" ? ref::f16_value(h) : ref::bf16_value(h);
      }
    } else {
      throw std::runtime_error(path + ": tensor " + name + " has dtype " + dtype +
                               " (F32, F16 or BF16 expected)");
    }
    ck.tensors[name] = std::move(v);
  }
  auto get = [&](const std::string& name, size_t numel) -> std::vector<float>& {
    auto it = ck.tensors.find(name);
    if (it == ck.tensors.end()) throw std::runtime_error(path + ": tensor " + name + " is missing");
    if (it->second.size() != numel)
      throw std::runtime_error(path + ": tensor " + name + " has " + std::to_string(it->second.size()) +
                               " values, expected " + std::to_string(numel));
    return it->second;
  };
  const size_t C = s.dim, Q = s.q_dim(), KV = s.kv_dim(), F = s.ffn_dim, V = s.n_vocab;
  // Fused tensors first (inserting into the map never moves the other vectors' data).
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<float> qkv;
    for (const char* n : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
      const auto& part = get(p + n, (std::string(n).rfind("self_attn.q", 0) == 0 ? Q : KV) * C);
      qkv.insert(qkv.end(), part.begin(), part.end());
    }
    ck.tensors["wqkv." + std::to_string(l)] = std::move(qkv);
    std::vector<float> gu = get(p + "mlp.gate_proj.weight", F * C);
    const auto& up = get(p + "mlp.up_proj.weight", F * C);
    gu.insert(gu.end(), up.begin(), up.end());
    ck.tensors["w_in." + std::to_string(l)] = std::move(gu);
  }
  HostWeights& w = ck.weights;
  w.tok_embed = get("model.embed_tokens.weight", V * C).data();
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    HostLayer L;
    L.attn_norm_w = get(p + "input_layernorm.weight", C).data();
    L.wqkv = ck.tensors.at("wqkv." + std::to_string(l)).data();
    L.wo = get(p + "self_attn.o_proj.weight", C * Q).data();
    L.mlp_norm_w = get(p + "post_attention_layernorm.weight", C).data();
    L.w_in = ck.tensors.at("w_in." + std::to_string(l)).data();
    L.w_out = get(p + "mlp.down_proj.weight", C * F).data();
    w.layers.push_back(L);
  }
  w.final_norm_w = get("model.norm.weight", C).data();
  if (!s.tie_embeddings) w.lm_head = get("lm_head.weight", V * C).data();
  return ck;
}

}  // namespace frost::cuda::testing
