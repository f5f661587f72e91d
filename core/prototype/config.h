#pragma once
// PrototypeConfig: every knob of the prototype regression method
// (docs/prototype.md, with its resTR / RLCS reliability layer).
//
// The seed's defaults table is reproduced field by field (marked "seed"). Everything the seed
// leaves open is marked "choice" with the reason; docs/prototype.md repeats the list.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost::prototype {

struct PrototypeConfig {
  // --- seed defaults table ---
  int64_t max_tokens = 256;  // S: tokens per text (BOS included), longer texts are truncated
  int64_t d_h = 256;         // head dimension of the prototype layer
  int64_t m = 8;             // memory tokens per example
  int64_t m_q = 8;           // compressed query tokens
  int64_t K = 128;           // prototypes
  int64_t T = 512;           // slot candidate pool (clipped to N when the dataset is smaller)
  int64_t L = 3;             // inference head layers
  int64_t H = 8;             // attention heads (every attention block)
  int64_t ffn_mult = 4;      // FFN expansion: ffn_mult * d_h
  double huber_delta = 0.5;
  int64_t epochs_a = 5;
  int64_t epochs_b = 10;
  double tau_start = 1.0;  // Gumbel temperature, linear per-epoch anneal tau_start -> tau_end
  double tau_end = 0.1;
  double lambda_emb = 0.1;
  double lambda_ov = 1.0;
  double lambda_rep = 0.1;
  double m_cos = 0.2;

  // --- choices the seed leaves open ---
  int64_t batch_size = 32;     // choice: minibatch B of both stages
  double lr = 1e-3;            // choice: AdamW (beta 0.9/0.999, eps 1e-8), constant lr
  double weight_decay = 0.01;  // choice: decoupled weight decay on matrices only
  double grad_clip = 1.0;      // choice: global L2 gradient-norm clip per step
  int64_t label_hidden = 64;   // choice: width of the label embedder E and its GELU
  double norm_eps = 1e-6;      // the seed's epsilon in key/slot normalisation
  double gumbel_eps = 1e-10;   // the seed's epsilon inside the Gumbel transform
  uint64_t seed = 0;           // parameter init, shuffling, Gumbel noise
  // Departure from the seed (docs/prototype.md, "Attribution"): gamma of the block similarity
  // bias. Every memory attention of the inference head (Stage B and Predict) adds
  // gamma * cos(k_query, k_proto) to the logits of all m+1 tokens of each prototype block, so
  // attention over prototypes starts from key similarity and a block's label token is bound to
  // its memory tokens. 0 = the seed's head exactly.
  double key_bias = 16.0;
  // choice (the seed does not say how slots start): "kmeans++" sets s_k to KeyCache keys drawn
  // by k-means++ seeding (D² = squared distance of unit keys) when Stage B starts, so the first
  // candidate pools already cover the key space; "normal" keeps the N(0, 1) draw of the net.
  std::string slot_init = "kmeans++";
  // Departure (docs/prototype.md, "Label reflection"), off by default: the probability that a
  // Stage B minibatch has its targets and all prototype labels reflected, y -> a + b - y. The
  // query alone then cannot tell the answer, so the head must read the labels of the prototypes
  // it attends to. Raises Prediction::label_reliance; costs accuracy when the keys are weak.
  double label_flip_p = 0.0;
  int64_t eval_batch = 64;  // batch of no-grad passes (cache build, evaluation)

  // Departure (docs/prototype.md, "Linear probe inside the head"): "ridge" fits ridge regression
  // on the mean-pooled frozen features of the training rows (lambda by 5-fold CV, the same fit
  // as the ridge_mean_pooled baseline) before Stage A, and the head predicts the residual of it
  // in logit space: y = a + (b-a) σ(z_probe + s·f_out(R)), with f_out's last layer starting at
  // zero (so training starts from the probe). "none" = the seed's output exactly.
  std::string probe = "ridge";
  // Rows of the training data held out of Stage A/B (never a prototype) to choose s in [0, 1]:
  // the head's residual is kept only as far as these rows say it helps (MAE down, Spearman not
  // down). 0 = no held-out rows, s = 1. Ignored (no rows held out) when probe is "none".
  double val_fraction = 0.1;
  // Verdict of the evaluation report: a head whose test MAE exceeds the linear probe's by more
  // than this (in label units) "trails" it; the job still succeeds, with a warning in its report.
  double probe_margin = 0.0;

  // --- resTR + RLCS (Predict-time reliability) ---
  double restr_norm_eps = 0.5;   // guard: ||Z_out|| <= (1 + eps) ||Z_in|| per example
  double restr_alpha_max = 1.0;  // alpha = alpha_max * agreement (0 when out of distribution)
  double restr_beta_max = 1.0;   // beta  = beta_max  * agreement
  int64_t rlcs_k = 10;           // neighbours in the KeyCache for both consistency scores
  double ood_quantile = 0.01;    // population consistency below this quantile -> OOD
  // choice (docs/prototype.md, "resTR that acts"): weight of the Stage B penalty
  // mean(relu(||Z_out|| / ||Z_in|| - (1 + restr_train_eps))^2) that trains resTR to stay inside
  // its own norm-inflation guard (restr_train_eps < restr_norm_eps leaves a margin for queries the
  // training rows do not cover), and resTR's output projections start at zero (identity).
  // 0 = the seed's unconstrained resTR (and its N(0, ...) / uniform init).
  double restr_guard_weight = 1.0;
  double restr_train_eps = 0.25;

  // --- feature cache (frozen backbone hidden states, fp16) ---
  int64_t feature_cache_bytes = 4LL << 30;  // in memory up to this, else spilled to disk
  std::string spill_dir;                    // "" = $TMPDIR (or /tmp)

  int64_t ffn_dim() const { return ffn_mult * d_h; }
};

// The fields live in one table (config.cc, core/common/config_fields.h) that drives set_field, the
// known keys, the per-field ranges and to_json.

// Range and consistency checks; INVALID_ARGUMENT naming the field and value.
absl::Status validate(const PrototypeConfig& cfg);

// `key=value` override of any field (frost-bench --set, job specs). INVALID_ARGUMENT for an
// unknown key (listing the known ones), a value that does not parse or is out of the field's range;
// cross-field rules (T >= K, d_h % H) are checked by validate(), which set_fields ends with.
absl::Status set_field(PrototypeConfig& cfg, const std::string& key, const std::string& value);
absl::Status set_fields(PrototypeConfig& cfg, const std::vector<std::string>& key_values);
// Every key set_field knows, in table order.
std::vector<std::string> config_keys();

nlohmann::json to_json(const PrototypeConfig& cfg);
// Every field must be known; missing fields keep their defaults. Result is validated.
absl::StatusOr<PrototypeConfig> config_from_json(const nlohmann::json& j);

// Gumbel temperature of Stage B epoch `epoch` (1-based): the seed's linear anneal
// tau = tau_start - (epoch-1)/(E-1) * (tau_start - tau_end); tau_start when E == 1.
double tau_for_epoch(const PrototypeConfig& cfg, int64_t epoch);

}  // namespace frost::prototype
