#pragma once
// PrototypeTrainer: the two-stage training run of the seed, as a library the job scheduler and
// frost-bench drive.
//
//   features  the frozen backbone once over every training text (FeatureCache, fp16)
//   stage_a   epochs_a epochs of L_A = Huber(ŷ, y) + λ_emb ||ĝ_emb(k) - E(y)||²/d_h
//   cache     MemCache (N×m×d_h fp16), KeyCache (N×d_h fp16, normalised), LabelCache
//   stage_b   epochs_b epochs of L_B = Huber + λ_ov L_ov + λ_rep L_rep, τ annealed per epoch
//   finalize  greedy masked decoding → K unique prototypes → PrototypeArtifact
//
// Choices the seed leaves open (also in config.h):
//  * Optimiser: AdamW (β 0.9/0.999, ε 1e-8, decoupled decay on Linear weights only), constant lr,
//    global-norm gradient clipping, a fresh optimiser for each stage.
//  * Stage B queries are the training set itself, one selection (one Gumbel draw, one Mem^(B))
//    per minibatch shared by its B queries, as in the seed's Algorithm 3.
//  * resTR is trained in Stage B with α, β ~ U(0, 1) drawn per example, so the head works across
//    the whole gating range RLCS may pick at Predict time (α = β = 0 included).
//  * E(y) is trainable in Stage A as the seed lists it, so the auxiliary target moves too.
//  * Randomness is a pure function of (seed, stage, epoch, step): each epoch's shuffle and each
//    step's Gumbel/α/β draws use a generator seeded from those numbers. A checkpoint therefore
//    needs no RNG state beyond its position, and a resumed run draws exactly what an
//    uninterrupted one would.
//
// Device (core/prototype/device.h): the feature cache's rows, MemCache / KeyCache / LabelCache, the net, the
// AdamW moments and every batch live on the compute device (the served model's, unless create() is told
// otherwise); the shuffles, Gumbel / α / β draws and k-means++ seeding draw on CPU generators and move their
// numbers there, and the hard picks of the selector read a CPU copy of the K×T scores. Checkpoints and the
// artifact are CPU tensors.
//
// Checkpoints (safetensors + JSON metadata, written atomically): every net tensor, the AdamW
// moments and step count of the current stage, stage/epoch/step, and fingerprints of the data,
// config and backbone; a checkpoint from another run is refused (FAILED_PRECONDITION). In Stage B
// the cache is rebuilt from the (frozen) Stage A weights instead of being stored.
#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "core/common/cancel.h"
#include "core/model/model_loader.h"
#include "core/prototype/artifact.h"
#include "core/prototype/config.h"
#include "core/prototype/data.h"
#include "core/prototype/device.h"
#include "core/prototype/features.h"
#include "core/prototype/net.h"
#include "core/prototype/selection.h"

namespace frost::prototype {

struct TrainProgress {
  std::string stage;                         // features | stage_a | cache | stage_b | finalize | done
  int64_t epoch = 0, epochs = 0;             // 1-based epoch of the stage
  int64_t step = 0, steps = 0;               // steps done in this epoch / steps per epoch
  int64_t global_step = 0, total_steps = 0;  // optimiser steps over both stages
  double loss = 0;                           // total loss of the last step
  double loss_reg = 0;                       // its Huber term
  double loss_aux = 0;                       // L_emb (stage A) or λ_ov L_ov + λ_rep L_rep (stage B)
  double tau = 0;                            // stage B temperature
  double examples_per_s = 0;                 // this stage so far
  double eta_s = 0;                          // remaining optimiser steps at this stage's rate
};

struct TrainHooks {
  const CancelToken* cancel = nullptr;                    // checked before every step and between texts
  std::function<void(const TrainProgress&)> on_progress;  // after every step / stage change
  std::string checkpoint_path;                            // "" = none; resumed from when the file exists
  int64_t checkpoint_every = 0;  // optimiser steps between checkpoints (0 = stage ends + cancel)
};

struct StageReport {
  double seconds = 0;
  int64_t peak_rss_bytes = 0;  // process RSS high-water mark during the stage
};

// The loss of one minibatch of each stage: what a training step differentiates (exposed for tests).
struct MinibatchLoss {
  at::Tensor loss, reg, aux;  // total, Huber, auxiliary (L_emb, or λ_ov L_ov + λ_rep L_rep)
  at::Tensor yhat;            // [B] predictions
  Selection sel;              // Stage B only
};
// L_A for features h [B,S,C], mask [B,S], labels y [B]. The label reaches only the L_emb target.
MinibatchLoss stage_a_loss(const PrototypeNet& net, const at::Tensor& h, const at::Tensor& mask,
                           const at::Tensor& y);
// L_B with the queries' own normalised keys q_keys [B,d] (used by key_bias only), resTR gates
// alpha/beta [B], KeyCache keys [N,d], MemCache mem_flat [N, m*d], LabelCache labels [N],
// Gumbel uniforms u [K,T] and temperature tau.
MinibatchLoss stage_b_loss(const PrototypeNet& net, const at::Tensor& h, const at::Tensor& mask,
                           const at::Tensor& y, const at::Tensor& q_keys, const at::Tensor& alpha,
                           const at::Tensor& beta, const at::Tensor& keys, const at::Tensor& mem_flat,
                           const at::Tensor& labels, const at::Tensor& u, double tau);

class PrototypeTrainer {
 public:
  // Checks the config against the data (K <= N, T clipped to N, labels inside the bounds).
  // `model` must outlive the trainer. Computes on compute_device(model).
  static absl::StatusOr<std::unique_ptr<PrototypeTrainer>> create(const LoadedModel& model,
                                                                  RegressionData train, LabelBounds bounds,
                                                                  PrototypeConfig cfg);
  // Computes on `device` (tests: the same run on the CPU and on a GPU).
  static absl::StatusOr<std::unique_ptr<PrototypeTrainer>> create(const LoadedModel& model,
                                                                  RegressionData train, LabelBounds bounds,
                                                                  PrototypeConfig cfg, ComputeDevice device);

  // Runs (or resumes) the whole pipeline. CANCELLED when hooks.cancel fires (after writing a
  // checkpoint when a path is set); FAILED_PRECONDITION for a checkpoint of another run.
  absl::StatusOr<PrototypeArtifact> run(const TrainHooks& hooks);

  const PrototypeConfig& config() const { return cfg_; }  // T clipped to N
  const ComputeDevice& device() const { return dev_; }
  const FeatureCache* features() const { return features_.get(); }
  const PrototypeNet* net() const { return net_.get(); }
  const at::Tensor& key_cache() const { return keys_; }   // [N, d] fp32 (fp16 values), on device()
  const at::Tensor& mem_cache() const { return mem16_; }  // [N, m, d] fp16, on device()
  const nlohmann::json& report() const { return report_; }
  int64_t steps_per_epoch() const;
  // Rows held out of Stage A/B (val_fraction) to choose the probe residual scale; never prototypes.
  const std::vector<int64_t>& val_rows() const { return val_idx_; }

 private:
  PrototypeTrainer() = default;

  absl::Status build_features(const TrainHooks& hooks);
  absl::Status build_cache();
  absl::Status fit_probe();  // cfg.probe == "ridge": ridge on the mean-pooled features → net buffers
  std::vector<int64_t> final_prototypes() const;  // greedy masked decoding, as dataset row indices
  // (z_probe, z_head) of the held-out rows: Stage A's head over each row's own memory, or the
  // Stage B head over the finalized prototypes with resTR off.
  absl::StatusOr<std::pair<std::vector<double>, std::vector<double>>> val_logits(bool stage_a) const;
  // Held-out metrics of the head (and the probe); choose_scale sets the probe residual scale s.
  absl::StatusOr<nlohmann::json> val_report(bool stage_a, bool choose_scale);
  absl::Status run_stage(int stage, const TrainHooks& hooks, int64_t start_epoch, int64_t start_step);
  absl::Status save_checkpoint(const std::string& path, int stage, int64_t epoch, int64_t step) const;
  // Returns (stage, epoch, step) or NOT_FOUND when there is no checkpoint file.
  absl::StatusOr<std::array<int64_t, 3>> load_checkpoint(const std::string& path);
  std::string run_fingerprint() const;
  void emit(const TrainHooks& hooks, const TrainProgress& p) const;
  at::Tensor index(const std::vector<int64_t>& idx) const;  // int64 index tensor on the compute device

  const LoadedModel* model_ = nullptr;
  ComputeDevice dev_;
  PrototypeConfig cfg_;
  RegressionData data_;
  LabelBounds bounds_;
  double mu_ = 0, sigma_ = 1;
  BackboneId backbone_;
  std::unique_ptr<FeatureCache> features_;
  std::unique_ptr<PrototypeNet> net_;
  at::Tensor labels_;                       // [N] fp32
  at::Tensor mem16_;                        // [N, m, d] fp16 MemCache
  at::Tensor mem_flat_;                     // [N_fit, m*d] fp32 values of the fit rows (Stage B table)
  at::Tensor keys16_;                       // [N, d] fp16 KeyCache
  at::Tensor keys_;                         // [N, d] fp32 values of keys16_
  std::vector<int64_t> fit_idx_, val_idx_;  // rows Stage A/B train on; held-out rows (sorted)
  at::Tensor keys_fit_, labels_fit_;        // Stage B selection tables over fit_idx_ (mem_flat_ too)

  // AdamW state of the current stage, aligned with `opt_params_`.
  struct Opt;
  std::shared_ptr<Opt> opt_;
  nlohmann::json report_ = nlohmann::json::object();
};

}  // namespace frost::prototype
