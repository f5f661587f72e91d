// The checkpoint loader on architecture-variant weights (core/model/model_loader.h): tiny safetensors
// checkpoints with the variant tensors under their HF names, for GPT-2 and LLaMA, and missing, extra or
// malformed variant tensors named.
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/model/builtin_models.h"
#include "core/model/kv_dims.h"
#include "core/model/model_config.h"
#include "core/model/model_loader.h"
#include "core/model/transformer.h"
#include "core/model/variants.h"
#include "tests/testing/st_writer.h"
#include "tests/testing/test_util.h"
#include "tests/unit/model/variants_testing.h"

namespace frost {
namespace {

using ::frost::testing::max_abs_diff;
using ::frost::testing::NamedTensors;
using ::frost::testing::TempDir;
using ::frost::testing::write_model_dir;
using ojson = nlohmann::ordered_json;
using namespace variants_testing;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------------------------
// Loader: a tiny safetensors checkpoint with the variant weights, HF names.

// GPT-2 names (Conv1D [in, out] for the base matrices; the variant tensors are nn.Linear [out, in]).
// A router layer's tensors under `prefix` (the architecture's attention module), as documented in
// docs/architecture_variants.md.
template <typename Add>
void add_router(const Add& add, const std::string& prefix, const VariantLayerWeights& v) {
  if (!v.router()) return;
  add(prefix + "router.fc1.weight", v.router_w1);
  add(prefix + "router.fc1.bias", v.router_b1);
  add(prefix + "router.fc2.weight", v.router_w2);
  add(prefix + "router.fc2.bias", v.router_b2);
  add(prefix + "proj_full.weight", v.proj_full);
  add(prefix + "proj_full.bias", v.proj_full_b);
  add(prefix + "proj_ra.weight", v.proj_ra);
  add(prefix + "proj_ra.bias", v.proj_ra_b);
}

NamedTensors gpt2_tensors(const ModelConfig& c, const ModelWeights& w) {
  NamedTensors ts;
  auto add = [&](const std::string& n, const at::Tensor& t) { ts.emplace_back(n, t.contiguous()); };
  add("wte.weight", w.tok_embed);
  add("wpe.weight", w.pos_embed);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "h." + std::to_string(i) + ".";
    add(p + "ln_1.weight", l.attn_norm_w);
    add(p + "ln_1.bias", l.attn_norm_b);
    add(p + "attn.c_attn.weight", l.wqkv.t());
    add(p + "attn.c_attn.bias", l.bqkv);
    if (l.wo.defined()) {
      add(p + "attn.c_proj.weight", l.wo.t());
      add(p + "attn.c_proj.bias", l.bo);
    }
    add(p + "ln_2.weight", l.mlp_norm_w);
    add(p + "ln_2.bias", l.mlp_norm_b);
    add(p + "mlp.c_fc.weight", l.w_in.t());
    add(p + "mlp.c_fc.bias", l.b_in);
    add(p + "mlp.c_proj.weight", l.w_out.t());
    add(p + "mlp.c_proj.bias", l.b_out);
    const VariantLayerWeights& v = l.var;
    add_router(add, p + "attn.", v);
    if (v.ctx_down.defined()) {
      add(p + "mlp.ctx_down.weight", v.ctx_down);
      add(p + "mlp.ctx_up.weight", v.ctx_up);
      add(p + "mlp.ctx_alpha", i == 0 ? v.ctx_alpha : v.ctx_alpha.reshape({1}));  // [] and [1] both load
      if (v.route_gate.defined()) add(p + "mlp.route_gate", v.route_gate);
    }
  }
  add("ln_f.weight", w.final_norm_w);
  add("ln_f.bias", w.final_norm_b);
  add("lm_head.weight", w.lm_head);
  return ts;
}

NamedTensors llama_tensors(const ModelConfig& c, const ModelWeights& w) {
  NamedTensors ts;
  const int64_t Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim;
  auto add = [&](const std::string& n, const at::Tensor& t) { ts.emplace_back(n, t.contiguous()); };
  add("model.embed_tokens.weight", w.tok_embed);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", l.attn_norm_w);
    add(p + "self_attn.q_proj.weight", l.wqkv.narrow(0, 0, Q));
    add(p + "self_attn.k_proj.weight", l.wqkv.narrow(0, Q, KV));
    add(p + "self_attn.v_proj.weight", l.wqkv.narrow(0, Q + KV, KV));
    if (l.wo.defined()) add(p + "self_attn.o_proj.weight", l.wo);
    add(p + "post_attention_layernorm.weight", l.mlp_norm_w);
    add(p + "mlp.gate_proj.weight", l.w_in.narrow(0, 0, F));
    add(p + "mlp.up_proj.weight", l.w_in.narrow(0, F, F));
    add(p + "mlp.down_proj.weight", l.w_out);
    add_router(add, p + "self_attn.", l.var);
  }
  add("model.norm.weight", w.final_norm_w);
  add("lm_head.weight", w.lm_head);
  return ts;
}

ojson gpt2_variant_json() {
  ojson j = gpt2_json();
  j["frost_variants"] = ojson::parse(R"({"ra_layers": [0], "sba": {"layers": [1], "alpha": 0.5},
      "router": {"layers": [0, 1], "ra_heads": 2, "hidden": 16}, "mlp_ctx": {"rank": 4, "conductor": true}})");
  return j;
}

at::Tensor logits_of(const Transformer& tf, const std::vector<int64_t>& toks) {
  SequenceKv kv(tf.kv_spec(static_cast<int64_t>(toks.size()), KvCodecKind::kF32));
  return tf.forward(at::tensor(toks, at::kLong), kv);
}

TEST(VariantLoaderTest, LoadsGpt2AndLlamaCheckpointsWithVariantWeights) {
  c10::InferenceMode im;
  {  // GPT-2, every variant
    auto cfg = parse_model_config(gpt2_variant_json().dump());
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    const auto tf = make_model(*cfg);
    TempDir dir("frost_variants");
    write_model_dir(dir.path(), gpt2_variant_json().dump(), gpt2_tensors(*cfg, tf->weights()));
    auto m = load_model(dir.path());
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->config.variants.router_layers, (std::vector<int64_t>{0, 1}));
    EXPECT_EQ((*m)->model->n_params(), tf->n_params());
    const std::vector<int64_t> toks = tokens(9, cfg->n_vocab);
    EXPECT_LE(max_abs_diff(logits_of(*(*m)->model, toks), logits_of(*tf, toks)), 1e-6);
  }
  {  // LLaMA (MHA), RA + router
    ojson j = llama_json(4);
    j["tie_word_embeddings"] = false;
    j["frost_variants"] = {{"ra_layers", {1}}, {"router", {{"layers", {0}}, {"ra_heads", 1}, {"hidden", 8}}}};
    auto cfg = parse_model_config(j.dump());
    ASSERT_TRUE(cfg.ok()) << cfg.status();
    const auto tf = make_model(*cfg);
    TempDir dir("frost_variants");
    write_model_dir(dir.path(), j.dump(), llama_tensors(*cfg, tf->weights()));
    auto m = load_model(dir.path());
    ASSERT_TRUE(m.ok()) << m.status();
    const std::vector<int64_t> toks = tokens(9, cfg->n_vocab);
    EXPECT_LE(max_abs_diff(logits_of(*(*m)->model, toks), logits_of(*tf, toks)), 1e-6);
  }
}

TEST(VariantLoaderTest, MissingExtraAndBadVariantTensorsAreNamed) {
  c10::InferenceMode im;
  auto cfg = parse_model_config(gpt2_variant_json().dump());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const auto tf = make_model(*cfg);
  const NamedTensors good = gpt2_tensors(*cfg, tf->weights());
  auto load_with = [&](const std::function<void(NamedTensors&)>& edit, const ojson& j = gpt2_variant_json()) {
    NamedTensors ts = good;
    edit(ts);
    TempDir dir("frost_variants");
    write_model_dir(dir.path(), j.dump(), ts);
    return load_model(dir.path()).status();
  };
  auto drop = [](const std::string& name) {
    return [name](NamedTensors& ts) {
      ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const auto& p) { return p.first == name; }),
               ts.end());
    };
  };
  auto set = [](const std::string& name, at::Tensor t) {
    return [name, t](NamedTensors& ts) {
      for (auto& p : ts)
        if (p.first == name) p.second = t;
    };
  };
  EXPECT_TRUE(load_with([](NamedTensors&) {}).ok());
  EXPECT_INVALID(load_with(drop("h.0.attn.proj_ra.weight")), "missing tensor 'h.0.attn.proj_ra.weight'");
  EXPECT_INVALID(load_with(drop("h.1.attn.router.fc2.bias")), "missing tensor 'h.1.attn.router.fc2.bias'");
  EXPECT_INVALID(load_with(drop("h.1.mlp.route_gate")), "missing tensor 'h.1.mlp.route_gate'");
  EXPECT_INVALID(load_with([](NamedTensors& ts) {
                   ts.emplace_back("h.0.attn.c_proj.weight", at::zeros({64, 64}));
                 }),
                 "unexpected tensor 'h.0.attn.c_proj.weight'");
  EXPECT_INVALID(load_with(set("h.0.attn.proj_full.weight", at::zeros({64, 48}))),
                 "tensor 'h.0.attn.proj_full.weight' has shape [64, 48], expected [64, 32]");
  EXPECT_INVALID(load_with(set("h.1.mlp.ctx_alpha", at::full({}, 1.5f))),
                 "tensor 'h.1.mlp.ctx_alpha' must be in [0, 1], got 1.5");
  EXPECT_INVALID(load_with(set("h.0.mlp.route_gate", at::full({2}, 0.2f))),
                 "tensor 'h.0.mlp.route_gate' has shape [2], expected []");
  // variant tensors without the config key are unexpected, and the plain model still wants c_proj
  ojson plain = gpt2_json();
  EXPECT_INVALID(load_with([](NamedTensors&) {}, plain), "missing tensor 'h.0.attn.c_proj.weight'");
}

}  // namespace
}  // namespace frost
