#pragma once
// Predictor: serves a PrototypeArtifact (the seed's "End-to-End Inference Pipeline") with the
// resTR + RLCS reliability layer.
//
// For each query text:
//  1. H_q = frozen backbone hidden states (S tokens, fp16-rounded as in training);
//     Q_q = QueryCompressor(H_q W_q); the query's own key k̄_q = KeyReadout(Compressor(H_q W_m))
//     normalised, the same map that built the KeyCache.
//  2. RLCS. Population consistency = the fraction of training examples whose leave-one-out mean
//     top-k cosine to the KeyCache is <= the query's mean top-k cosine (an empirical CDF value in
//     [0, 1]: low = the query sits where few training texts do). Agreement consistency =
//     1 - |ŷ_0 - ŷ_knn| / (b - a), with ŷ_0 the head's prediction on the unrefined query tokens and
//     ŷ_knn the similarity-weighted mean label of those k neighbours.
//     Out of distribution when population consistency < ood_quantile: then α = β = 0.
//     Otherwise α = alpha_max · agreement, β = beta_max · agreement (refine more when the head
//     and the neighbourhood agree).
//  3. Q_q' = resTR(Q_q; α, β) with its invariant guards (identity on violation, counted).
//  4. ŷ = a + (b - a) σ(f_out(R^(L))) from the inference head over Q_q' and the fixed prototype
//     memory [M_{i_k}; E(y_{i_k})]_k.
//  5. Attribution: the memory-attention weights of the regression token, averaged over the L
//     layers and the H heads (each layer's and head's weights sum to 1 over the K(m+1) memory
//     tokens, so their mean does too), summed per prototype block P_k. The weights over the K
//     prototypes therefore sum to 1; the top ones are returned with index, text and label.
#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model_loader.h"
#include "core/prototype/artifact.h"
#include "core/prototype/device.h"
#include "core/prototype/net.h"

namespace frost::prototype {

struct Attribution {
  int64_t slot = 0;
  int64_t index = 0;
  std::string id, text;
  float label = 0;
  double weight = 0;
};

struct Prediction {
  double value = 0;            // ŷ in [a, b]
  double value_unrefined = 0;  // ŷ_0: the head on Q_q before resTR
  double knn_value = 0;        // ŷ_knn
  double population_consistency = 0;
  double agreement_consistency = 0;
  double alpha = 0, beta = 0;
  bool out_of_distribution = false;
  bool restr_fallback = false;  // a resTR guard fired and the refinement was dropped
  // |ŷ − ŷ with every prototype's label token replaced by E(train mean)|: how much the labels of
  // the prototypes drive ŷ. Near 0: the head answered from the query and the top prototypes are
  // the examples it looked at, not its evidence (docs/prototype.md, "Attribution").
  double label_reliance = 0;
  std::vector<Attribution> top;  // descending weight
  std::vector<double> weights;   // all K prototype weights (slot order), sum 1
};

class Predictor {
 public:
  // FAILED_PRECONDITION when `model` is not the backbone the artifact was trained on (identity
  // and weight fingerprint); INVALID_ARGUMENT when the artifact's tensors do not fit its config.
  // `model` must outlive the predictor. Computes on compute_device(model), or on `device`.
  static absl::StatusOr<std::unique_ptr<Predictor>> create(PrototypeArtifact art, const LoadedModel& model);
  static absl::StatusOr<std::unique_ptr<Predictor>> create(PrototypeArtifact art, const LoadedModel& model,
                                                           ComputeDevice device);

  // top_k in [0, K]. INVALID_ARGUMENT naming texts[i] for a text that does not tokenize.
  absl::StatusOr<std::vector<Prediction>> predict(const std::vector<std::string>& texts, int top_k) const;
  // Same from precomputed backbone features (training-time evaluation), on any device.
  absl::StatusOr<std::vector<Prediction>> predict_features(const at::Tensor& h, const at::Tensor& mask,
                                                           int top_k) const;

  const PrototypeArtifact& artifact() const { return art_; }
  const PrototypeNet& net() const { return *net_; }
  const ComputeDevice& device() const { return dev_; }
  RestrStats restr_stats() const;

 private:
  Predictor() = default;
  PrototypeArtifact art_;
  const LoadedModel* model_ = nullptr;
  ComputeDevice dev_;
  std::unique_ptr<PrototypeNet> net_;
  at::Tensor mem_fixed_;   // [1, K(m+1), d]
  at::Tensor mem_hidden_;  // mem_fixed_ with every label token E(train mean): label_reliance
  at::Tensor keys_;        // [N, d] fp32
  at::Tensor proto_keys_;  // [K, d] the prototypes' rows of keys_ (key_bias)
  at::Tensor labels_;      // [N] fp32
  at::Tensor population_;  // [N] sorted
  mutable std::atomic<int64_t> n_applied_{0}, n_fb_shape_{0}, n_fb_nonfinite_{0}, n_fb_norm_{0};
};

// RLCS population reference: the sorted leave-one-out mean top-k cosine of every key in `keys`
// ([N, d], normalised). k is clipped to N - 1.
absl::StatusOr<at::Tensor> population_reference(const at::Tensor& keys, int64_t k);

}  // namespace frost::prototype
