#pragma once
// Calibration of a KVSplice (core/kv/kvsplice.h) on a frozen model: the library behind the `kvsplice`
// job kind and `frost-bench kvsplice`.
//
//  1. collect: run the calibration windows through the model with an fp32 cache and read every layer's
//     K and V rows back (post-RoPE, as the codec sees them): [N, d] per layer.
//  2. PCA: per layer and for K and V, σ = 1, b = −mean, C = U_rᵀ, E = U_r from the SVD of the centred rows
//     (the seed's "hybrid approach": principled initialisation, then fine-tuning).
//  3. fine-tune: all four tensors of every splice on the next-token KL
//       KL(p_clean_fp32(· | w≤t) ‖ p_kvsplice(· | w≤t)), averaged over positions,
//     with the frozen model in between (Transformer::forward passes gradients through the splice's fp32
//     reconstruction; the fp16 latent rounding is straight-through). Adam, global-norm clip 1.0, seeded
//     batches (core/train/train_util.h), checkpoint/resume like kv_repair.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kv/fisher.h"
#include "core/kv/kvsplice.h"
#include "core/train/repair_train.h"
#include "core/train/train_util.h"
#include "core/model/transformer.h"

namespace frost {

// What the PCA initialisation minimises: E‖x − x̂‖² (euclidean, the seed's plain PCA) or the error
// attention sees (attention: K weighted by the queries' second moment, V by W_oᵀW_o; kvsplice_from_pca).
enum class KvPcaMetric { kAttention, kEuclidean };

struct KvSpliceConfig {
  int64_t rank = 0;    // latent size r; 0 = the Fisher-suggested rank (the job's default), clamped to [1, d]
  int64_t k_rank = 0;  // K latent size when > 0 (else rank); K and V may differ (core/kv/kvsplice.h)
  int64_t v_rank = 0;  // V latent size when > 0 (else rank)
  KvLatentDtype latent = KvLatentDtype::kF16;        // how the cache stores the latents ("fp16" / "int8")
  KvPcaMetric pca_metric = KvPcaMetric::kAttention;  // "attention" / "euclidean"
  int64_t window = 64;                               // tokens per calibration window (BOS included)
  int64_t steps = 100;  // fine-tuning steps after the PCA initialisation (0 = PCA only)
  int64_t batch = 4;
  double lr = 1e-3;
  int64_t pca_windows = 0;          // windows whose rows feed the PCA (0 = all)
  int64_t self_sample_windows = 0;  // extra calibration windows sampled from the model
  double fisher_threshold = 0.9;    // energy for the suggested rank
  int64_t fim_rank = 0;             // > 0: also evaluate FIMKVSplice (temporal) at this rank
  uint64_t seed = 0;

  // The K and V ranks this config trains (0 where rank is still unresolved).
  KvSpliceRanks ranks() const { return {k_rank > 0 ? k_rank : rank, v_rank > 0 ? v_rank : rank}; }
};

// key=value overrides of every field (keys: kvsplice_config_keys()). One field table in kvsplice_train.cc
// (core/common/config_fields.h) drives the parsing, the known keys, the ranges and kvsplice_config_json.
// INVALID_ARGUMENT naming the key, the value and the range.
absl::Status set_kvsplice_field(KvSpliceConfig& cfg, const std::string& key, const std::string& value);
std::vector<std::string> kvsplice_config_keys();
// Every field's range and the model (rank <= n_head_kv · head_dim, window <= max_pos, ...).
absl::Status validate_kvsplice_config(const KvSpliceConfig& cfg, const ModelConfig& model);
std::string kvsplice_config_json(const KvSpliceConfig& cfg);

// Every layer's K and V rows over the windows, fp32 cache: k[l], v[l] are [N, d].
// Also, per layer, the attention metrics of K and V ([d, d], block-diagonal over kv groups): K's is
// E[q qᵀ] summed over the group's query heads (the queries that probe those rows), V's Σ_h W_o[:, h]ᵀ
// W_o[:, h] over the group's heads (identity in router layers).
struct KvRows {
  std::vector<at::Tensor> k, v;
  std::vector<at::Tensor> k_metric, v_metric;
};
absl::StatusOr<KvRows> collect_kv_rows(const Transformer& model, const std::vector<TokenWindow>& windows);

// The PCA-initialised splice of ranks (r_k, r_v) from the rows. When energy is given it receives, per
// layer, the fraction of the centred rows' variance the rank-r subspace keeps, for K and for V ([l][0],
// [l][1]) — in the metric when metric is set. metric: attention-aware PCA with rows.k_metric / v_metric
// (KvPcaMetric::kAttention, the default of train_kvsplice). whiten: the latent components are scaled to unit
// variance (C = diag(1/s) Uᵀ, E = U diag(s); the same reconstruction). Choice: train_kvsplice whitens for
// int8 latents, whose one scale per row would otherwise leave the small components a few quantisation levels;
// fp16 latents keep plain PCA.
absl::StatusOr<std::shared_ptr<KvSpliceSet>> kvsplice_from_pca(
    const KvSpliceDims& dims, KvSpliceRanks ranks, const KvRows& rows,
    std::vector<std::array<double, 2>>* energy = nullptr, bool whiten = false, bool metric = false);

// PCA initialisation (from the first pca_windows windows) then cfg.steps of fine-tuning. cfg.ranks() must
// be resolved (> 0). CANCELLED after writing a checkpoint when the token fires. pca_init, when given,
// receives the PCA initialisation itself (untrained; the report's baseline), from the same collected rows.
absl::StatusOr<std::shared_ptr<KvSpliceSet>> train_kvsplice(const Transformer& model,
                                                            const KvSpliceConfig& cfg,
                                                            const std::vector<TokenWindow>& windows,
                                                            const KvRepairTrainOptions& opts = {},
                                                            std::shared_ptr<KvSpliceSet>* pca_init = nullptr);

// Runs the windows through the model (fp32 cache, reference path) and accumulates every layer's attention
// probabilities into a Fisher accumulator (core/kv/fisher.h). All windows must have the same length.
absl::StatusOr<FisherAccumulator> accumulate_fisher(const Transformer& model,
                                                    const std::vector<TokenWindow>& windows);

}  // namespace frost
