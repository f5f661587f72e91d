#pragma once
// VariantConfig: the architecture variants a checkpoint declares under the config.json key
// "frost_variants" (docs/architecture_variants.md). A checkpoint without the key has an empty
// VariantConfig and runs exactly the plain LLaMA / GPT-2 math.
//
//   "frost_variants": {
//     "ra_layers": [0, 2],                        reciprocal attention: scores k_i·q_j
//     "sba": {"layers": [1], "alpha": 0.5},       symmetric bidirectional attention
//     "router": {"layers": [1], "ra_heads": 1,    compute router: FULL heads | RA heads, each
//                "hidden": 16},                   group its own output projection, mixed per token
//     "mlp_ctx": {"rank": 64, "layers": [0, 1],   low-rank MLP context (GPT-2 only); "layers"
//                 "conductor": false}             absent = every layer
//   }
//
// Every key is optional; unknown keys are errors. The structural checks (types, ranges that need no
// model dimension) are parse_variant_config's; the checks against the model (layer indices, heads,
// architecture) are validate_variant_config's, which validate_model_config calls.
#include <algorithm>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace frost {

struct ModelConfig;

struct VariantConfig {
  // The config.json key.
  static constexpr const char* kKey = "frost_variants";

  // RA layers: row i scores s_ij = k_i·q_j (j <= i). Need n_head == n_head_kv.
  std::vector<int64_t> ra_layers;
  // SBA layers: p = alpha·softmax_j(q_i·k_j/√d) + (1 − alpha)·softmax_j(k_i·q_j/√d). Need
  // n_head == n_head_kv; disjoint from ra_layers. alpha in [0, 1], one value for all SBA layers.
  std::vector<int64_t> sba_layers;
  double sba_alpha = 0.5;
  // Router layers: heads [0, H − router_ra_heads) are the FULL group, the last router_ra_heads
  // heads the RA group; router MLP 4 → router_hidden → 2.
  std::vector<int64_t> router_layers;
  int64_t router_ra_heads = 0;
  int64_t router_hidden = 16;
  // Low-rank MLP context (GPT-2 only): mlp_ctx_layers lists the layers that carry ctx_down/ctx_up
  // (rank mlp_ctx_rank); mlp_ctx_conductor adds a route gate g per such layer (context used iff
  // g < 0.5).
  std::vector<int64_t> mlp_ctx_layers;
  int64_t mlp_ctx_rank = 0;
  bool mlp_ctx_conductor = false;

  static bool in(const std::vector<int64_t>& v, int64_t l) {
    return std::find(v.begin(), v.end(), l) != v.end();
  }
  bool is_ra(int64_t l) const { return in(ra_layers, l); }
  bool is_sba(int64_t l) const { return in(sba_layers, l); }
  bool is_router(int64_t l) const { return in(router_layers, l); }
  bool has_mlp_ctx(int64_t l) const { return in(mlp_ctx_layers, l); }
  bool any() const {
    return !ra_layers.empty() || !sba_layers.empty() || !router_layers.empty() || !mlp_ctx_layers.empty();
  }
};

// Reads root["frost_variants"] (absent or null: leaves *out empty). `n_layer` resolves the default
// of mlp_ctx.layers (all layers). Errors are INVALID_ARGUMENT "<label>: frost_variants.<field> ...".
absl::Status parse_variant_config(const nlohmann::json& root, const std::string& label, int64_t n_layer,
                                  VariantConfig* out);

// Checks cfg.variants against the rest of cfg: layer indices in [0, n_layer) without duplicates,
// RA/SBA layers disjoint and with n_head == n_head_kv, router ra_heads in [1, n_head), mlp_ctx only
// for GPT-2. `label` prefixes messages ("config.json: " or "").
absl::Status validate_variant_config(const ModelConfig& cfg, const std::string& label);

}  // namespace frost
