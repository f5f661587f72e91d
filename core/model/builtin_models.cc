#include "core/model/builtin_models.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace frost {
namespace {

ModelConfig llama_like(int64_t dim, int64_t n_layer, int64_t n_head, int64_t n_head_kv, int64_t ffn,
                       int64_t vocab, int64_t max_pos) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.architecture = "LlamaForCausalLM";
  c.n_vocab = vocab;
  c.dim = dim;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_head_kv = n_head_kv;
  c.head_dim = dim / n_head;
  c.ffn_dim = ffn;
  c.max_pos = max_pos;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-5;
  c.tie_embeddings = true;
  c.act = Activation::kSilu;
  c.bos_id = 1;
  c.eos_ids = {2};
  return c;
}

// splitmix64: tiny, fast, and the same on every platform.
struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // uniform in [-1, 1)
  float uniform_pm1() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0); }
};

at::Tensor rand_tensor(SplitMix64& rng, std::vector<int64_t> shape, float std, float mean = 0.f) {
  at::Tensor t = at::empty(shape, at::kFloat);
  float* p = t.data_ptr<float>();
  const float a = std * std::sqrt(3.f);  // uniform[-a, a] has this std
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = mean + a * rng.uniform_pm1();
  return t;
}

// The tensors of cfg.variants (core/model/variants.h), from a generator of their own so that the
// plain weights stay the same bits with or without variants. Router layers drop wo / bo for
// proj_full / proj_ra; ctx_alpha is drawn in [0.2, 0.8]; the conductor's route gate alternates
// 0.3 (context on) / 0.7 (off) from the first MLP-context layer on.
void add_random_variant_weights(const ModelConfig& c, uint64_t seed, at::ScalarType wd, ModelWeights* w) {
  SplitMix64 rng{seed ^ 0xA11A7E5ull};
  const VariantConfig& v = c.variants;
  const int64_t C = c.dim, D = c.head_dim, F = c.ffn_dim;
  int64_t n_ctx = 0;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    VariantLayerWeights& vw = w->layers[static_cast<size_t>(l)].var;
    if (v.is_router(l)) {
      LayerWeights& lw = w->layers[static_cast<size_t>(l)];
      lw.wo = at::Tensor();
      lw.bo = at::Tensor();
      const int64_t hid = v.router_hidden, nr = v.router_ra_heads, nf = c.n_head - nr;
      vw.router_w1 = rand_tensor(rng, {hid, 4}, 0.5f);
      vw.router_b1 = rand_tensor(rng, {hid}, 0.5f);
      vw.router_w2 = rand_tensor(rng, {2, hid}, 1.f / std::sqrt(static_cast<float>(hid)));
      vw.router_b2 = rand_tensor(rng, {2}, 0.3f);
      vw.proj_full = rand_tensor(rng, {C, nf * D}, 1.f / std::sqrt(static_cast<float>(c.q_dim()))).to(wd);
      vw.proj_full_b = rand_tensor(rng, {C}, 0.05f);
      vw.proj_ra = rand_tensor(rng, {C, nr * D}, 1.f / std::sqrt(static_cast<float>(nr * D))).to(wd);
      vw.proj_ra_b = rand_tensor(rng, {C}, 0.05f);
    }
    if (v.has_mlp_ctx(l)) {
      const int64_t R = v.mlp_ctx_rank;
      vw.ctx_down = rand_tensor(rng, {R, C}, 1.f / std::sqrt(static_cast<float>(C))).to(wd);
      vw.ctx_up = rand_tensor(rng, {F, R}, 1.f / std::sqrt(static_cast<float>(R))).to(wd);
      vw.ctx_alpha = at::full({}, 0.5f + 0.3f * rng.uniform_pm1(), at::kFloat);
      if (v.mlp_ctx_conductor) vw.route_gate = at::full({}, n_ctx % 2 == 0 ? 0.3f : 0.7f, at::kFloat);
      ++n_ctx;
    }
  }
}

}  // namespace

std::vector<std::string> builtin_model_names() { return {"builtin:tiny", "builtin:tiny-gpt2", "builtin:15m"}; }

absl::StatusOr<ModelConfig> builtin_config(const std::string& name) {
  if (name == "builtin:tiny") {
    ModelConfig c = llama_like(64, 2, 4, 2, 172, 512, 512);
    c.tie_embeddings = false;
    return c;
  }
  // The stories15M shape with a 2048-token context (RoPE tables only: no weight depends on it), so the
  // serving benchmark's long prompts (1,500 tokens) fit.
  if (name == "builtin:15m") return llama_like(288, 6, 6, 6, 768, 32000, 2048);
  if (name == "builtin:tiny-gpt2") {
    ModelConfig c;
    c.arch = Arch::kGpt2;
    c.architecture = "GPT2LMHeadModel";
    c.n_vocab = 512;
    c.dim = 64;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_head_kv = 4;
    c.head_dim = 16;
    c.ffn_dim = 256;
    c.max_pos = 512;
    c.norm_eps = 1e-5;
    c.tie_embeddings = false;
    c.act = Activation::kGeluNew;
    c.bos_id = 1;
    c.eos_ids = {2};
    return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown built-in model '", name, "' (known: ",
                                                 absl::StrJoin(builtin_model_names(), ", "), ")"));
}

ModelWeights random_weights(const ModelConfig& c, uint64_t seed, at::ScalarType wd) {
  SplitMix64 rng{seed};
  const int64_t C = c.dim, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim, V = c.n_vocab;
  const bool gpt2 = c.arch == Arch::kGpt2;
  auto mat = [&](int64_t out, int64_t in) { return rand_tensor(rng, {out, in}, 1.f / std::sqrt(static_cast<float>(in))).to(wd); };
  auto vec = [&](int64_t n, float std, float mean) { return rand_tensor(rng, {n}, std, mean); };
  ModelWeights w;
  // Small embeddings (as HF initialises them) so the residual stream is dominated by the
  // blocks: with tied, large random embeddings every token mostly predicts itself.
  w.tok_embed = rand_tensor(rng, {V, C}, 0.05f).to(wd);
  if (gpt2) w.pos_embed = rand_tensor(rng, {c.max_pos, C}, 0.1f);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    LayerWeights lw;
    lw.attn_norm_w = vec(C, 0.1f, 1.f);
    lw.wqkv = mat(Q + 2 * KV, C);
    lw.wo = mat(C, Q);
    lw.mlp_norm_w = vec(C, 0.1f, 1.f);
    lw.w_in = mat(gpt2 ? F : 2 * F, C);
    lw.w_out = mat(C, F);
    if (gpt2) {
      lw.attn_norm_b = vec(C, 0.05f, 0.f);
      lw.bqkv = vec(Q + 2 * KV, 0.05f, 0.f);
      lw.bo = vec(C, 0.05f, 0.f);
      lw.mlp_norm_b = vec(C, 0.05f, 0.f);
      lw.b_in = vec(F, 0.05f, 0.f);
      lw.b_out = vec(C, 0.05f, 0.f);
    }
    w.layers.push_back(std::move(lw));
  }
  w.final_norm_w = vec(C, 0.1f, 1.f);
  if (gpt2) w.final_norm_b = vec(C, 0.05f, 0.f);
  if (c.tie_embeddings) {
    w.lm_head = w.tok_embed;
  } else {
    // Untied head (builtin:tiny, builtin:tiny-gpt2) with logits of std ~2.5, and zero rows for
    // the byte tokens that are not printable text (control bytes but '\n', bytes >= 0x7F): the
    // demo's random output then reads as text, not as replacement characters.
    at::Tensor head = rand_tensor(rng, {V, C}, 2.5f / std::sqrt(static_cast<float>(C)));
    for (int id = 0; id < 3; ++id) head[id].zero_();  // <unk> <s> </s>: rare, not never
    for (int b = 0; b < 256 && 3 + b < V; ++b) {
      if ((b < 0x20 && b != '\n') || b >= 0x7F) head[3 + b].zero_();
    }
    w.lm_head = head.to(wd);
  }
  if (c.variants.any()) add_random_variant_weights(c, seed, wd, &w);
  return w;
}

}  // namespace frost
