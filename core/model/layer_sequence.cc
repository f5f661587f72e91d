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
    ops.rope_kv_append(l, var.is_ra(l));
    ops.attention(l);
    if (var.is_sba(l)) ops.sba_mix(l);
    if (var.is_router(l)) {
      ops.router_out(l);
    } else {
      ops.linear(LayerMatrix::kO, l);
    }
    if (var.has_mlp_ctx(l)) ops.keep_block_out(l);
    // 3. MLP block: x = x + W_out · act(W_in · norm(x))
    ops.norm(NormSite::kMlp, l);
    ops.linear(LayerMatrix::kMlpIn, l);
    if (var.has_mlp_ctx(l)) ops.mlp_ctx_mix(l);
    ops.activation(l);
    ops.linear(LayerMatrix::kMlpOut, l);
  }
  // 4. the rows that need logits → final norm → head (→ the device's draw)               [L, C] → [L, V]
  ops.gather();
  ops.norm(NormSite::kFinal, cfg.n_layer);
  if (out == StepOutput::kHidden) return;
  ops.linear(LayerMatrix::kHead, cfg.n_layer);
  if (out == StepOutput::kSample) ops.sample();
}

namespace {
[[noreturn]] void lacks(const char* op) {
  throw std::logic_error(absl::StrCat("layer sequence: this backend has no ", op,
                                      " (check_layer_features should have refused the model)"));
}
}  // namespace

void LayerOps::sample() { lacks("device sampler"); }
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
  return absl::OkStatus();
}

}  // namespace frost
