#pragma once
// The math of the architecture variants (core/model/variant_config.h; docs/architecture_variants.md),
// for both model paths: at-op forms for Transformer::forward() and raw-pointer forms for the CPU step
// (Transformer::forward_batch, the layer sequence's variant ops). transformer.cc / forward_batch.cc only call into here.
//
//  * RA (reciprocal attention) needs no code here: both paths swap q and k (after RoPE) before the
//    KV pipeline, so the codec's K slot stores q rows and the probe against the cache is k_i;
//    every codec, the corruption stage and the repair stage then work unchanged.
//  * SBA (symmetric bidirectional attention): p = α·p_fwd + (1 − α)·p_rev. Design choice: the
//    forward half runs the normal pipeline (codec stores k, v); the reverse half reads a second
//    store of the SAME codec kind held by SequenceKv (SequenceKv::reverse(l), created for the
//    layers in KvSpec::sba_layers) whose K slot holds q rows and whose V slot holds v rows.
//    Because the mix is linear in p, out = α·attend(q_i; K, V) + (1 − α)·attend(k_i; Q, V).
//    Costs: that layer's cache bytes double (v is stored twice); gains: every codec (float, int8,
//    int4, a future kvsplice one) works with its own kernels, Q is stored with the same precision
//    as K, and both halves read bit-identical V rows. (An fp32 Q-only store would need a p-weighted
//    V sum per codec storage format.) SBA refuses the repair stage (SequenceKv::repair) and a
//    KvStudy's corruption (a clear c10::Error): they are defined for one K/V store per layer.
//  * Router: out = p_ra·(proj_ra(o_ra) + b_ra) + p_full·(proj_full(o_full) + b_full), with
//    (p_ra, p_full) = softmax(fc2(gelu(fc1(f)))), f = [‖x − E‖, ‖x‖, ‖E‖, ⟨x, E⟩], x the layer's
//    residual-stream input, E the token's embedding row (no position embedding). GELU is the exact
//    (erf) form, torch.nn.GELU()'s default.
//  * MLP context (GPT-2): u = c_fc(ln_2(x)); u ← (1 − α)·u + α·ctx_up(ctx_down(a)) before gelu_new,
//    a = the attention block's output as added to the residual (after c_proj + bias, or the router
//    mix). α = the stored ctx_alpha, in [0, 1]. Conductor: only when the stored route gate g < 0.5;
//    g does not mix the residual (the blocks are otherwise plain GPT-2).
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "core/kv/sequence_kv.h"
#include "core/model/model_config.h"

namespace frost {

// The variant tensors of one layer (undefined when the layer lacks that variant). Layout [out, in]
// (torch.nn.Linear) for both families — no Conv1D transpose. Matrices in the model's weight dtype,
// the rest fp32.
struct VariantLayerWeights {
  // router layers (their LayerWeights::wo / bo are undefined)
  at::Tensor router_w1, router_b1;    // [hidden, 4], [hidden]
  at::Tensor router_w2, router_b2;    // [2, hidden], [2]; logit 0 = RA, 1 = FULL
  at::Tensor proj_full, proj_full_b;  // [C, (H − n_ra)·D], [C]
  at::Tensor proj_ra, proj_ra_b;      // [C, n_ra·D], [C]
  // MLP-context layers
  at::Tensor ctx_down;    // [R, C]
  at::Tensor ctx_up;      // [F, R]
  at::Tensor ctx_alpha;   // [] in [0, 1]
  at::Tensor route_gate;  // [] in [0, 1]; conductor mode only

  bool router() const { return proj_full.defined(); }
  // Whether the MLP uses the context this layer: ctx weights present and (no gate or g < 0.5).
  bool ctx_active() const;
  float alpha() const { return ctx_alpha.data_ptr<float>()[0]; }
  std::vector<const at::Tensor*> tensors() const;
};

// Per-sequence buffers of the variants on the fast path (part of DecodeScratch).
struct VariantScratch {
  std::vector<float> e_tok;                      // [C] token embedding row (router)
  std::vector<float> att_rev;                    // [H·D] (SBA reverse half)
  std::vector<float> out_full, out_ra;           // [C] (router)
  std::vector<float> router_h;                   // [hidden] (router)
  std::vector<float> ctx_summary, ctx_r, ctx_h;  // [C], [R], [F] (MLP context)
};

namespace variants {

// Sizes the buffers the config's variants need (empty vectors otherwise).
void size_scratch(const ModelConfig& cfg, int64_t max_tokens, VariantScratch* s);

// Layers whose SequenceKv keeps a reverse (q, v) store: the SBA layers.
inline const std::vector<int64_t>& reverse_store_layers(const ModelConfig& cfg) {
  return cfg.variants.sba_layers;
}

// Throws c10::Error naming the tensor when layer l's weights do not match cfg's variants
// (has_wo: whether LayerWeights::wo is defined; router layers must not have it).
void check_layer_weights(const ModelConfig& cfg, int64_t l, const VariantLayerWeights& w, bool has_wo);

// ---- reference path (at ops, T tokens at positions pos .. pos+T−1, S = pos + T) ----

// SBA layer l: att_fwd [H, T, D] is the forward half already computed from the main store; q, k, v
// [T, H, D] this step's rows (after RoPE). Appends (q, v) to the reverse store, returns
// α·att_fwd + (1 − α)·softmax(k Qᵀ·scale + causal)·V  [H, T, D].
// `corrupted`: the forward() runs a KvStudy with corruption (refused here, as the repair stage is).
at::Tensor sba_attend(const ModelConfig& cfg, int64_t l, SequenceKv& kv, bool corrupted,
                      const at::Tensor& att_fwd, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, int64_t pos, const at::Tensor& mask, double scale);
// Router features [T, 4] = [‖x − e‖, ‖x‖, ‖e‖, ⟨x, e⟩] and probabilities [T, 2] = (p_ra, p_full).
at::Tensor router_features(const at::Tensor& x, const at::Tensor& e);
at::Tensor router_probs(const VariantLayerWeights& w, const at::Tensor& x, const at::Tensor& e);
// Router layer output [T, C] from the attention heads o [T, H·D], layer input x [T, C] and token
// embeddings e [T, C].
at::Tensor router_out(const VariantLayerWeights& w, const at::Tensor& o, const at::Tensor& x,
                      const at::Tensor& e);
// MLP context: u [T, F] (c_fc output) mixed with ctx_up(ctx_down(summary)), summary [T, C].
at::Tensor mlp_ctx_mix(const VariantLayerWeights& w, const at::Tensor& u, const at::Tensor& summary);

// ---- fast path (one token, raw pointers, no LibTorch op) ----

// SBA: appends (q, v) to the reverse store at pos and mixes its half into att [H·D] in place.
void sba_step(const ModelConfig& cfg, int64_t l, SequenceKv& kv, const float* q, const float* k,
              const float* v, int64_t pos, float scale, VariantScratch& s, float* att);
// Router output [C] into out from att [H·D], layer input x [C] and embedding row e [C].
void router_step(const ModelConfig& cfg, const VariantLayerWeights& w, const float* att, const float* x,
                 const float* e, VariantScratch& s, float* out);
// MLP context: h_in [F] ← (1 − α)·h_in + α·ctx_up(ctx_down(summary)).
void mlp_ctx_step(const ModelConfig& cfg, const VariantLayerWeights& w, const float* summary,
                  VariantScratch& s, float* h_in);

// ---- parameter counts ----

// ctx_down [R, C] + ctx_up [F, R] of one layer: R·C + F·R.
inline int64_t mlp_ctx_params_per_layer(int64_t C, int64_t F, int64_t R) { return R * C + F * R; }

// What cfg's variants add to the plain model of the same config (Transformer::n_params() of the
// variant model minus that of the plain one).
struct VariantParams {
  int64_t router_mlp = 0;       // fc1 (4·h + h) + fc2 (2·h + 2) per router layer
  int64_t router_proj = 0;      // (proj_full + proj_ra + their biases) − (o_proj/c_proj + its bias, if any)
  int64_t mlp_ctx = 0;          // ctx_down + ctx_up per MLP-context layer
  int64_t mlp_ctx_scalars = 0;  // ctx_alpha (+ route_gate in conductor mode) per MLP-context layer
  int64_t total() const { return router_mlp + router_proj + mlp_ctx + mlp_ctx_scalars; }
};
VariantParams variant_params(const ModelConfig& cfg);

// The accounting of docs/architecture_variants.md ("Parameter counts"): weight
// matrices of the blocks only — attention 4·C², MLP 2·C·(mult·C) per layer; no embeddings, biases
// or norms — for n_layer layers of width C, MLP multiplier mult, context rank R.
struct SeedCtxAccounting {
  int64_t attn_per_layer = 0, mlp_per_layer = 0, baseline_per_layer = 0, baseline_total = 0;
  int64_t ctx_down = 0, ctx_up = 0, ctx_per_layer = 0, ctx_total = 0;  // low-rank context
  int64_t lowrank_per_layer = 0, lowrank_total = 0;                    // baseline + low-rank context
  int64_t fullrank_ctx_per_layer = 0, fullrank_total = 0;              // baseline + C × mult·C ctx_proj
};
SeedCtxAccounting seed_ctx_accounting(int64_t C, int64_t n_layer, int64_t mult, int64_t R);

}  // namespace variants
}  // namespace frost
