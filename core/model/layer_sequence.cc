// The decoder's layer sequence (core/model/layer_sequence.h): the one place the order of a step is written.
#include "core/model/layer_sequence.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace frost {

void run_layer_sequence(const ModelConfig& cfg, LayerOps& ops, StepOutput out) {
  const VariantConfig& var = cfg.variants;
  // 1. embeddings (+ learned positions for GPT-2)                                     x: [R, C]
  ops.embed();
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    // 2. attention block: x = x + W_o · attention(RoPE(W_qkv · norm(x)))
    ops.norm(NormSite::kAttn, l);
    ops.linear(LayerMatrix::kQkv, l);
    if (cfg.qk_norm) ops.qk_norm(l);
    ops.rope_kv_append(l, var.is_ra(l));
    ops.attention(l);
    if (var.is_sba(l)) ops.sba_mix(l);
    if (var.is_router(l)) {
      ops.router_out(l);
    } else {
      ops.linear(LayerMatrix::kO, l);
    }
    if (cfg.post_norms) ops.post_norm(NormSite::kAttn, l);
    if (var.has_mlp_ctx(l)) ops.keep_block_out(l);
    // 3. MLP block: x = x + W_out · act(W_in · norm(x))
    ops.norm(NormSite::kMlp, l);
    ops.linear(LayerMatrix::kMlpIn, l);
    if (var.has_mlp_ctx(l)) ops.mlp_ctx_mix(l);
    ops.activation(l);
    ops.linear(LayerMatrix::kMlpOut, l);
    if (cfg.post_norms) ops.post_norm(NormSite::kMlp, l);
  }
  // 4. the rows that need logits → final norm → head (→ the device's draw)               [L, C] → [L, V]
  ops.gather();
  ops.norm(NormSite::kFinal, cfg.n_layer);
  if (out == StepOutput::kHidden) return;
  ops.linear(LayerMatrix::kHead, cfg.n_layer);
  if (cfg.final_softcap > 0) ops.logit_softcap();
  if (out == StepOutput::kSample) ops.sample();
}

namespace {
[[noreturn]] void lacks(const char* op) {
  throw std::logic_error(absl::StrCat("layer sequence: this backend has no ", op,
                                      " (check_layer_features should have refused the model)"));
}
}  // namespace

void LayerOps::sample() { lacks("device sampler"); }
void LayerOps::qk_norm(int64_t) { lacks("q / k norm"); }
void LayerOps::post_norm(NormSite, int64_t) { lacks("post norm"); }
void LayerOps::logit_softcap() { lacks("logit soft cap"); }
void LayerOps::sba_mix(int64_t) { lacks("symmetric bidirectional attention"); }
void LayerOps::router_out(int64_t) { lacks("compute router"); }
void LayerOps::keep_block_out(int64_t) { lacks("MLP context"); }
void LayerOps::mlp_ctx_mix(int64_t) { lacks("MLP context"); }

absl::Status check_layer_features(const ModelConfig& cfg, const LayerFeatures& have, const std::string& who,
                                  const std::string& why) {
  const VariantConfig& v = cfg.variants;
  auto refuse = [&](const char* feature, const char* field) {
    return absl::FailedPreconditionError(absl::StrCat(who, ": architecture variants: ", feature,
                                                      " (config.json ", VariantConfig::kKey, ".", field, ") ",
                                                      why));
  };
  if (!v.ra_layers.empty() && !have.ra) return refuse("reciprocal attention", "ra_layers");
  if (!v.sba_layers.empty() && !have.sba) return refuse("symmetric bidirectional attention", "sba");
  if (!v.router_layers.empty() && !have.router) return refuse("the compute router", "router");
  if (!v.mlp_ctx_layers.empty() && !have.mlp_ctx) return refuse("the low-rank MLP context", "mlp_ctx");
  if (have.families || cfg.plain()) return absl::OkStatus();
  // The first of the families' features the model uses, by the config field that turns it on.
  const char* feature = "";
  const char* field = "";
  if (cfg.rope_scaling.type != RopeType::kDefault && cfg.rope_scaling.type != RopeType::kDynamic) {
    feature = rope_type_name(cfg.rope_scaling.type), field = "rope_scaling";
  } else if (cfg.rot_dim() != cfg.head_dim) {
    feature = "partial rotary embeddings", field = "partial_rotary_factor";
  } else if (cfg.any_window()) {
    feature = "sliding-window attention", field = "sliding_window";
  } else if (cfg.rope_local_theta > 0) {
    feature = "a local RoPE base", field = "rope_local_base_freq";
  } else if (cfg.qk_norm) {
    feature = "q / k norms", field = "architectures";
  } else if (cfg.post_norms || cfg.embed_scale != 1.0) {
    feature = "Gemma's scaled embeddings and post norms", field = "architectures";
  } else if (cfg.attn_scale != 0) {
    feature = "a query scale", field = "query_pre_attn_scalar";
  } else if (cfg.attn_softcap != 0) {
    feature = "attention soft-capping", field = "attn_logit_softcapping";
  } else if (cfg.final_softcap != 0) {
    feature = "logit soft-capping", field = "final_logit_softcapping";
  } else if (cfg.act != Activation::kSilu) {
    feature = "a tanh-GELU gate", field = "hidden_activation";
  } else {
    feature = "q / k / v biases without an o bias", field = "architectures";
  }
  return absl::FailedPreconditionError(absl::StrCat(who, ": ", cfg.architecture, " feature: ", feature,
                                                    " (config.json ", field, ") ", why));
}

}  // namespace frost
