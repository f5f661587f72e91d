#pragma once
// Fisher information of attention and Fisher-guided temporal KV compression
// (docs/kvsplice.md: the Fisher information matrix of attention, what it implies for KV compression, the
// Fisher metrics of calibration, and FIMKVSplice).
//
// The Fisher matrix. A softmax row p (one query over T keys) has the log-sum-exp Hessian
// (1/τ²)(diag(p) − p pᵀ), which is the Fisher information of the categorical distribution p. Per head we
// use the seed's KVSplice calibration formula
//   F = mean_i (diag(p_i) − p_i p_iᵀ)                        [T, T]
// over every query row i of every window. Choice: without the 1/τ² factor (τ is a property of the
// model, not of the cache, and every derived metric except eigmax and trace is scale-free). All T rows
// of a window count in the mean, including causal row 0, which is one-hot and contributes 0. F is
// computed in double: each window adds diag(Σ_i p_i) − PᵀP (P = that head's [T, T] probabilities).
// Rows are renormalised to sum to exactly 1 in double first (inputs must already sum to 1 within
// 1e-3), so the all-ones vector is in F's null space to double precision rather than to float32's
// 1e-7: without that, float32 rounding would fake a tiny smallest eigenvalue and a bogus cond.
// Causality itself is not required (the math does not use it; a reverse-attention matrix works too).
//
// Spectrum metrics, per layer and head, from λ_1 ≥ … ≥ λ_T = at::linalg_eigvalsh(mean F) in double,
// negatives from rounding clamped to 0 (F is PSD):
//   eigmax = λ_1                    trace = Σ λ
//   Non-null eigenvalues: those > 1e-10 · λ_1; k = their number. diag(p) − ppᵀ always has the all-ones
//   vector in its null space, so λ_T = 0 and the seed's λ_max / λ_min would be infinite. Choice:
//   cond  = λ_1 / λ_k               the condition number on the non-null subspace
//   decay = λ_1 / λ_min(5, k)       the seed's λ_max / λ_5th, on the non-null eigenvalues (so for
//                                   T < 6 or a spectrum of rank < 5 it is λ_1 over the last non-null one)
//   energy(r) = Σ_{j≤r} λ_j / trace for r = 1..T (cumulative normalised energy; energy(T) = 1 exactly)
//   energy_r8 = energy(min(8, T)),  energy_r16 = energy(min(16, T))   (so both are 1 when T ≤ 8)
//   The zero matrix (λ_1 = 0: e.g. only one-hot rows): eigmax = trace = 0, cond = decay = 1 and
//   energy(r) = 1 for every r (there is no Fisher energy to lose), so no metric is NaN or infinite.
// Per layer: the mean and the population standard deviation (divide by H, not H − 1: the heads are the
// whole population, not a sample) across heads of each metric, and the head-mean energy curve.
//
// Rank selection (the seed's "Actionable Workflow"): suggested_rank(threshold) is the smallest r in
// 1..T such that in every layer the head-mean energy(r) ≥ threshold. It always exists (energy(T) = 1).
//
// FIMKVSplice (temporal compression along the sequence axis, not features): with U_r [T, r] the
// eigenvectors of a head's F for its r largest eigenvalues (orthonormal columns, in descending order),
//   compress(X [.., T, D]) = U_rᵀ X  [.., r, D]       expand(C) = U_r C  [.., T, D]
// so reconstruct = U_r U_rᵀ X, the orthogonal projection onto the top-r Fisher directions. It minimises
// the Fisher-weighted error tr(Eᵀ F E), E = X − X̂, averaged over isotropic X, among rank-r orthogonal
// projections (Ky Fan). The bases are fixed: calibrated once (FimKvSplice, from a FisherAccumulator, so
// every window must have the calibration's T), or per window from that window's probabilities
// (fim_compress, the seed's FIMKVSplice.compress(K, attn_probs)). Eigenvectors of repeated eigenvalues
// are any orthonormal basis of their eigenspace (LAPACK's choice); signs are arbitrary.
//
// Errors: absl::Status for what the caller passes in (probabilities, ranks, incomplete calibration);
// TORCH_CHECK for internal invariants and for tensor shapes in compress/expand (programming errors).
// Memory: the accumulator holds n_layers · n_heads · T² doubles (12 × 12 heads at T = 512: 302 MB).
#include <ATen/ATen.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost {

// One head's spectrum metrics (see the header comment for the definitions).
struct FisherHeadMetrics {
  double eigmax = 0, trace = 0, cond = 1, energy_r8 = 1, energy_r16 = 1, decay = 1;
  std::vector<double> eigenvalues;  // [T], descending, clamped to ≥ 0
  std::vector<double> energy;       // [T]: energy[r − 1] = energy(r)
};

// One layer: mean and population std across heads, the head-mean energy curve, and the heads.
struct FisherLayerMetrics {
  int64_t layer = 0;
  double eigmax_mean = 0, eigmax_std = 0, trace_mean = 0, trace_std = 0, cond_mean = 0, cond_std = 0;
  double energy_r8_mean = 0, energy_r8_std = 0, energy_r16_mean = 0, energy_r16_std = 0;
  double decay_mean = 0, decay_std = 0;
  std::vector<double> energy_mean;  // [T]: head mean of energy(r), r = 1..T
  std::vector<FisherHeadMetrics> heads;
};

struct FisherReport {
  int64_t window = 0;   // T
  int64_t windows = 0;  // windows per layer
  int64_t rows = 0;     // query rows per layer and head = windows · T
  std::vector<FisherLayerMetrics> layers;

  // Smallest r in 1..T with energy_mean[r − 1] ≥ threshold in every layer.
  // INVALID_ARGUMENT unless 0 < threshold ≤ 1.
  absl::StatusOr<int64_t> suggested_rank(double threshold = 0.9) const;

  // Stable schema (every number a JSON number; keys as listed, per-head "energy" has T entries):
  // {"window": T, "windows": n, "rows": n·T, "threshold": 0.9, "suggested_rank": r,
  //  "layers": [{"layer": 0,
  //              "eigmax_mean", "eigmax_std", "trace_mean", "trace_std", "cond_mean", "cond_std",
  //              "energy_r8_mean", "energy_r8_std", "energy_r16_mean", "energy_r16_std",
  //              "decay_mean", "decay_std", "energy_mean": [T],
  //              "heads": [{"head": 0, "eigmax", "trace", "cond", "energy_r8", "energy_r16", "decay",
  //                         "energy": [T]}]}]}
  // INVALID_ARGUMENT for a bad threshold (as suggested_rank).
  absl::StatusOr<nlohmann::json> to_json(double threshold = 0.9) const;
};

// Checks one window's probabilities [H, T, T] (T ≥ 1, floating point, finite, ≥ 0, every row sums to 1
// within 1e-3); n_heads / window < 0 mean "any". INVALID_ARGUMENT naming the problem otherwise.
absl::Status validate_attention_probs(const at::Tensor& probs, int64_t n_heads = -1, int64_t window = -1);

// Mean Fisher matrix of one window, [H, T, T] double (rows renormalised; see above). Validates probs.
absl::StatusOr<at::Tensor> window_fisher(const at::Tensor& probs);

// Spectrum metrics of one symmetric PSD matrix [T, T] (any floating dtype; computed in double).
FisherHeadMetrics fisher_metrics(const at::Tensor& fisher);

// Eigenvectors of the r largest eigenvalues of symmetric fisher [.., T, T], as [.., T, r] double with
// orthonormal columns in descending eigenvalue order. TORCH_CHECK 1 ≤ r ≤ T.
at::Tensor fisher_top_eigenvectors(const at::Tensor& fisher, int64_t r);

// Accumulates per-layer, per-head Fisher sums over windows of one fixed length T.
class FisherAccumulator {
 public:
  FisherAccumulator(int64_t n_layers, int64_t n_heads);  // both ≥ 1 (TORCH_CHECK)

  // Adds one window of layer `layer`: probs [H, T, T]. The first window of any layer fixes T for the
  // accumulator. INVALID_ARGUMENT for a bad layer, shape, other T, or invalid probabilities (nothing
  // is added then).
  absl::Status add(int64_t layer, const at::Tensor& probs);

  int64_t n_layers() const { return static_cast<int64_t>(sums_.size()); }
  int64_t n_heads() const { return n_heads_; }
  int64_t window() const { return window_; }  // 0 before the first add
  int64_t windows(int64_t layer) const;
  int64_t rows(int64_t layer) const;  // windows(layer) · T

  // Mean F of one layer, [H, T, T] double. TORCH_CHECK that the layer has a window.
  at::Tensor mean_fisher(int64_t layer) const;

  // The report. FAILED_PRECONDITION unless every layer has received the same number (≥ 1) of windows
  // (one window = one forward pass, which has probabilities in every layer).
  absl::StatusOr<FisherReport> finish() const;

 private:
  int64_t n_heads_ = 0, window_ = 0;
  std::vector<at::Tensor> sums_;  // per layer [H, T, T] double (undefined until its first window)
  std::vector<int64_t> windows_;
};

// Calibrated Fisher-guided temporal compression: per layer and head a fixed basis U_r [T, r].
class FimKvSplice {
 public:
  // Bases from an accumulator's mean F; needs every layer to have a window. INVALID_ARGUMENT unless
  // 1 ≤ rank ≤ T; FAILED_PRECONDITION for an empty layer.
  static absl::StatusOr<FimKvSplice> from_accumulator(const FisherAccumulator& acc, int64_t rank);
  // Bases from per-layer Fisher matrices [H, T, T] (same H and T in all; symmetric: only the lower
  // triangle is read, as by at::linalg_eigh). INVALID_ARGUMENT
  // for no layers, bad shapes, non-finite values or a rank outside 1..T.
  static absl::StatusOr<FimKvSplice> from_fisher(const std::vector<at::Tensor>& fisher, int64_t rank);

  int64_t n_layers() const { return static_cast<int64_t>(basis_.size()); }
  int64_t n_heads() const { return basis_.front().size(0); }
  int64_t window() const { return basis_.front().size(1); }
  int64_t rank() const { return basis_.front().size(2); }
  // [H, T, r] double, orthonormal columns (descending eigenvalue order).
  const at::Tensor& basis(int64_t layer) const;

  // K or V of one layer, x [.., H, T, D] → U_rᵀ x [.., H, r, D], in x's dtype. TORCH_CHECK shapes.
  at::Tensor compress(int64_t layer, const at::Tensor& x) const;
  // c [.., H, r, D] → U_r c [.., H, T, D], in c's dtype.
  at::Tensor expand(int64_t layer, const at::Tensor& c) const;
  at::Tensor reconstruct(int64_t layer, const at::Tensor& x) const {
    return expand(layer, compress(layer, x));
  }

 private:
  explicit FimKvSplice(std::vector<at::Tensor> basis) : basis_(std::move(basis)) {}
  std::vector<at::Tensor> basis_;  // per layer [H, T, r] double
};

// The per-window variant (the seed's FIMKVSplice): the basis comes from this window's probabilities.
struct FimCompressed {
  at::Tensor c;      // [H, r, D], k's dtype
  at::Tensor basis;  // [H, T, r] double
};
// k [H, T, D], probs [H, T, T] → U_rᵀ k with U_r from window_fisher(probs). INVALID_ARGUMENT for bad
// probs, a k whose H or T differs, or r outside 1..T.
absl::StatusOr<FimCompressed> fim_compress(const at::Tensor& k, const at::Tensor& probs, int64_t r);
// U_r c → [H, T, D] in c's dtype.
at::Tensor fim_expand(const FimCompressed& compressed);

}  // namespace frost
