#pragma once
// Baselines for the prototype evaluation report: ridge regression on dense features with a
// cross-validated penalty, and k-nearest-neighbour regression on cosine similarity.
// Everything runs on the CPU and is deterministic for a given build and thread count. No LibTorch
// exception escapes: every function validates its inputs and returns absl::Status errors.
#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace frost::prototype {

// ---- Ridge ------------------------------------------------------------------------------------

// A linear model on standardized features:
//   pred(x) = ((x - x_mean) / x_scale) . w + bias
// Fitting minimises  sum_i (y_i - bias - z_i . w)^2 + lambda * |w|^2  over the standardized rows
// z_i. Standardizing (with the training rows' mean and population std) makes lambda independent
// of the features' scale; columns whose std is ~0 (<= 1e-12 * max(1, |mean|), i.e. constant up to
// rounding) get x_scale = 1, so they become ~0 and do not blow up. The intercept is not penalised
// (the features are centred, so bias = mean(y)).
struct RidgeModel {
  at::Tensor w;        // [D] double, weights on the standardized features
  double bias = 0;     // intercept (= mean of the training labels)
  double lambda = 0;   // the penalty used for the final fit
  double cv_rmse = 0;  // k-fold CV RMSE of `lambda`; NaN when fit without CV (fit_ridge)
  at::Tensor x_mean;   // [D] double
  at::Tensor x_scale;  // [D] double, > 0
  // (lambda, CV RMSE) for every candidate, in the order given; empty for fit_ridge.
  std::vector<std::pair<double, double>> cv_rmse_by_lambda;
};

// Fits ridge on all rows of X ([N, D], float or double, finite) with a fixed lambda > 0.
// Solved in double through the eigendecomposition of Z^T Z ([D, D]) or, when D > N, of the Gram
// matrix Z Z^T ([N, N]) — the same solution, whichever matrix is smaller.
absl::StatusOr<RidgeModel> fit_ridge(const at::Tensor& X, absl::Span<const float> y, double lambda);

// Picks lambda from `lambdas` (each finite and > 0) by `folds`-fold cross-validated RMSE, then refits
// on all rows. Folds come from a Fisher-Yates permutation of the rows driven by std::mt19937_64(seed)
// (row perm[i] goes to fold i % folds), so the split is a pure function of (N, folds, seed). Each
// fold standardizes with its own training rows only (no leakage). CV RMSE pools the squared errors
// of all held-out rows. Ties in CV RMSE go to the larger lambda. Requires 2 <= folds <= N.
absl::StatusOr<RidgeModel> fit_ridge_cv(const at::Tensor& X, absl::Span<const float> y,
                                        std::vector<double> lambdas = {1e-3, 1e-2, 1e-1, 1, 10, 100},
                                        int folds = 5, uint64_t seed = 0);

// Predictions [N] double for X ([N, D], float or double, finite).
absl::StatusOr<at::Tensor> ridge_predict(const RidgeModel& model, const at::Tensor& X);

// ---- k-NN -------------------------------------------------------------------------------------

// The k nearest training rows of each query by cosine similarity.
struct KnnResult {
  at::Tensor values;   // [Q, k] float32 cosine similarities, decreasing along each row
  at::Tensor indices;  // [Q, k] int64 training-row indices
};

// Keys ([N, d] and [Q, d], float or double, finite) are L2-normalised (a zero row stays zero, so its
// similarity to everything is 0) and compared in float32, on train_keys' device (the query keys are moved
// there); the k best are chosen on the CPU, and the result is CPU tensors. Ties are broken by the lower training
// index, so the result does not depend on the selection algorithm. Queries are processed in chunks
// of at most 1024 rows and at most ~64 MB of [chunk, N] similarities.
// exclude_self: the queries are the training rows themselves (Q must equal N); query row i never
// gets index i (leave-one-out). Requires 1 <= k <= N (N - 1 with exclude_self).
absl::StatusOr<KnnResult> knn_topk(const at::Tensor& train_keys, const at::Tensor& query_keys, int k,
                                   bool exclude_self = false);

// k-NN regression: prediction [Q] double = sum_j w_j * label_j / sum_j w_j over the k neighbours of
// knn_topk, with w_j = max(cos_j, 0) + 1e-6. Neighbours with negative similarity count (almost)
// nothing unless all do, and then the prediction degrades to the plain mean of the k labels.
// train_labels must have N finite values.
absl::StatusOr<at::Tensor> knn_predict(const at::Tensor& train_keys, absl::Span<const float> train_labels,
                                       const at::Tensor& query_keys, int k, bool exclude_self = false);

}  // namespace frost::prototype
