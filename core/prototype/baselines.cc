// Ridge (CV over lambda, eigendecomposition path) and cosine k-NN regression on the CPU.
#include "core/prototype/baselines.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"

namespace frost::prototype {
namespace {

constexpr double kConstantColumnRel = 1e-12;       // std <= this * max(1, |mean|) counts as constant
constexpr int64_t kKnnMaxChunkRows = 1024;         // queries per similarity block
constexpr int64_t kKnnMaxChunkBytes = 64ll << 20;  // bytes of one [chunk, N] float block
constexpr double kKnnWeightFloor = 1e-6;           // w_j = max(cos_j, 0) + floor

// Checks that `t` is a defined 2-D floating tensor of finite values. `name` is used in messages.
absl::Status check_matrix(const at::Tensor& t, const std::string& name) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(name, ": tensor is undefined"));
  if (t.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected a 2-D tensor, got ", t.dim(), " dims"));
  }
  if (t.scalar_type() != at::kFloat && t.scalar_type() != at::kDouble) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": dtype ", std::string(c10::toString(t.scalar_type())), " is not float or double"));
  }
  FROST_ASSIGN_OR_RETURN(bool finite,
                         torch_call([&] { return t.numel() == 0 || at::isfinite(t).all().item<bool>(); }));
  if (!finite) return absl::InvalidArgumentError(absl::StrCat(name, ": contains NaN or infinite values"));
  return absl::OkStatus();
}

absl::Status check_labels(absl::Span<const float> y, int64_t n, const std::string& name) {
  if (static_cast<int64_t>(y.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", y.size(), " labels for ", n, " rows"));
  }
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": label[", i, "] = ", y[i], " is not finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status check_lambda(double lambda, const std::string& name) {
  if (!std::isfinite(lambda) || !(lambda > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": lambda ", lambda, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

at::Tensor labels_tensor(absl::Span<const float> y) {
  return at::from_blob(const_cast<float*>(y.data()), {static_cast<int64_t>(y.size())}, at::kFloat)
      .to(at::kDouble);  // .to() copies, so the tensor does not alias the caller's memory
}

// Column mean and scale of X ([n, D] double) as in RidgeModel.
std::pair<at::Tensor, at::Tensor> column_stats(const at::Tensor& X) {
  at::Tensor mean = X.mean(0);
  at::Tensor std = (X - mean).pow(2).mean(0).sqrt();  // population std
  at::Tensor constant = std <= mean.abs().clamp_min(1.0) * kConstantColumnRel;
  at::Tensor scale = at::where(constant, at::ones_like(std), std);
  return {mean, scale};
}

// All ridge solutions for one standardized design Z ([n, D], centred) and centred labels yc ([n]):
// one eigendecomposition, then each lambda costs a matrix-vector product.
class RidgePath {
 public:
  RidgePath(const at::Tensor& Z, const at::Tensor& yc) : Z_(Z), dual_(Z.size(1) > Z.size(0)) {
    // Primal: w = V diag(1/(s+l)) V^T Z^T yc with Z^T Z = V diag(s) V^T.
    // Dual:   w = Z^T U diag(1/(s+l)) U^T yc with Z Z^T = U diag(s) U^T (push-through identity).
    const at::Tensor G = dual_ ? at::matmul(Z, Z.t()) : at::matmul(Z.t(), Z);
    auto [s, V] = at::linalg_eigh(G);
    s_ = s.clamp_min(0.0);  // G is PSD; rounding can leave eigenvalues of about -1e-12
    V_ = V;
    c_ = at::matmul(V.t(), dual_ ? yc : at::matmul(Z.t(), yc));
  }

  at::Tensor solve(double lambda) const {
    const at::Tensor coef = at::matmul(V_, c_ / (s_ + lambda));
    return dual_ ? at::matmul(Z_.t(), coef) : coef;
  }

 private:
  at::Tensor Z_;
  bool dual_;
  at::Tensor s_, V_, c_;
};

// Fit on rows (X [n, D] double, y [n] double): the standardization and the path.
struct FoldFit {
  at::Tensor mean, scale;
  double y_mean;
  RidgePath path;
};

FoldFit fit_fold(const at::Tensor& X, const at::Tensor& y) {
  auto [mean, scale] = column_stats(X);
  const at::Tensor Z = (X - mean) / scale;
  const double y_mean = y.mean().item<double>();
  return FoldFit{mean, scale, y_mean, RidgePath(Z, y - y_mean)};
}

RidgeModel model_from(const FoldFit& f, double lambda) {
  RidgeModel m;
  m.w = f.path.solve(lambda);
  m.bias = f.y_mean;
  m.lambda = lambda;
  m.cv_rmse = std::numeric_limits<double>::quiet_NaN();
  m.x_mean = f.mean;
  m.x_scale = f.scale;
  return m;
}

// Deterministic fold of each row: Fisher-Yates permutation from mt19937_64(seed), row perm[i] in
// fold i % folds. The modulo draw is very slightly biased for huge N; it only has to be fixed.
std::vector<int> fold_assignment(int64_t n, int folds, uint64_t seed) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(perm[i], perm[j]);
  }
  std::vector<int> fold(n);
  for (int64_t i = 0; i < n; ++i) fold[perm[i]] = static_cast<int>(i % folds);
  return fold;
}

at::Tensor index_tensor(const std::vector<int64_t>& idx) {
  return at::from_blob(const_cast<int64_t*>(idx.data()), {static_cast<int64_t>(idx.size())}, at::kLong)
      .clone();
}

RidgeModel fit_ridge_cv_impl(const at::Tensor& X, const at::Tensor& y, const std::vector<double>& lambdas,
                             int folds, uint64_t seed) {
  const int64_t n = X.size(0);
  const std::vector<int> fold = fold_assignment(n, folds, seed);
  std::vector<double> sq_err(lambdas.size(), 0.0);
  for (int f = 0; f < folds; ++f) {
    std::vector<int64_t> tr, te;
    for (int64_t i = 0; i < n; ++i) (fold[i] == f ? te : tr).push_back(i);
    const at::Tensor tr_idx = index_tensor(tr), te_idx = index_tensor(te);
    const FoldFit ff = fit_fold(X.index_select(0, tr_idx), y.index_select(0, tr_idx));
    const at::Tensor Zte = (X.index_select(0, te_idx) - ff.mean) / ff.scale;
    const at::Tensor yte = y.index_select(0, te_idx);
    for (size_t l = 0; l < lambdas.size(); ++l) {
      const at::Tensor pred = at::matmul(Zte, ff.path.solve(lambdas[l])) + ff.y_mean;
      sq_err[l] += (pred - yte).pow(2).sum().item<double>();
    }
  }
  std::vector<std::pair<double, double>> by_lambda;
  size_t best = 0;
  for (size_t l = 0; l < lambdas.size(); ++l) {
    by_lambda.emplace_back(lambdas[l], std::sqrt(sq_err[l] / static_cast<double>(n)));
    const double r = by_lambda[l].second, rb = by_lambda[best].second;
    if (r < rb || (r == rb && lambdas[l] > lambdas[best])) best = l;
  }
  RidgeModel m = model_from(fit_fold(X, y), lambdas[best]);
  m.cv_rmse = by_lambda[best].second;
  m.cv_rmse_by_lambda = std::move(by_lambda);
  return m;
}

// The selection of knn_topk for one query row: the k best of `sim` ([n]) by (similarity desc,
// index asc), skipping `skip` (-1 for none). A strict total order, so the result is unique.
void select_topk(const float* sim, int64_t n, int64_t skip, int k, std::vector<int64_t>& scratch,
                 float* out_v, int64_t* out_i) {
  scratch.clear();
  for (int64_t j = 0; j < n; ++j) {
    if (j != skip) scratch.push_back(j);
  }
  auto better = [sim](int64_t a, int64_t b) { return sim[a] > sim[b] || (sim[a] == sim[b] && a < b); };
  std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), better);
  std::sort(scratch.begin(), scratch.begin() + k, better);
  for (int j = 0; j < k; ++j) {
    out_i[j] = scratch[j];
    out_v[j] = sim[scratch[j]];
  }
}

at::Tensor l2_normalized_float(const at::Tensor& keys) {
  const at::Tensor k = keys.to(at::kFloat);  // on the keys' device
  // Same convention as torch.nn.functional.normalize (eps 1e-12): zero rows stay zero.
  return (k / k.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12)).contiguous();
}

KnnResult knn_topk_impl(const at::Tensor& train_keys, const at::Tensor& query_keys, int k,
                        bool exclude_self) {
  // The similarities are computed on the training keys' device (the prototype head's: a GPU's KeyCache stays
  // there), the selection on the CPU from a copy of each chunk's [rows, n] similarities, so the result and
  // its tie-breaking are the same function on every device.
  const at::Tensor T = l2_normalized_float(train_keys);
  const at::Tensor Qn = l2_normalized_float(query_keys).to(T.device());
  const int64_t n = T.size(0), q = Qn.size(0);
  KnnResult r{at::empty({q, k}, at::kFloat), at::empty({q, k}, at::kLong)};
  const int64_t chunk =
      std::clamp<int64_t>(kKnnMaxChunkBytes / (n * static_cast<int64_t>(sizeof(float))), 1, kKnnMaxChunkRows);
  const at::Tensor Tt = T.t();
  float* vals = r.values.data_ptr<float>();
  int64_t* idxs = r.indices.data_ptr<int64_t>();
  for (int64_t c0 = 0; c0 < q; c0 += chunk) {
    const int64_t c1 = std::min(q, c0 + chunk);
    const at::Tensor S = at::matmul(Qn.slice(0, c0, c1), Tt).contiguous().to(at::kCPU);  // [c1 - c0, n]
    const float* s = S.data_ptr<float>();
    // Rows are independent, so the parallel split does not change the result.
    at::parallel_for(c0, c1, 16, [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> scratch;
      scratch.reserve(n);
      for (int64_t row = r0; row < r1; ++row) {
        select_topk(s + (row - c0) * n, n, exclude_self ? row : -1, k, scratch, vals + row * k,
                    idxs + row * k);
      }
    });
  }
  return r;
}

absl::Status check_knn_args(const at::Tensor& train_keys, const at::Tensor& query_keys, int k,
                            bool exclude_self) {
  FROST_RETURN_IF_ERROR(check_matrix(train_keys, "knn: train_keys"));
  FROST_RETURN_IF_ERROR(check_matrix(query_keys, "knn: query_keys"));
  const int64_t n = train_keys.size(0), q = query_keys.size(0);
  if (train_keys.size(1) != query_keys.size(1) || train_keys.size(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("knn: train_keys have dim ", train_keys.size(1),
                                                   " but query_keys have dim ", query_keys.size(1),
                                                   " (must be equal and >= 1)"));
  }
  if (exclude_self && q != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("knn: exclude_self needs the queries to be the training rows, but Q=", q, " != N=", n));
  }
  const int64_t max_k = n - (exclude_self ? 1 : 0);
  if (k < 1 || k > max_k) {
    return absl::InvalidArgumentError(absl::StrCat("knn: k=", k, " must be in [1, ", max_k, "] (N=", n,
                                                   exclude_self ? ", exclude_self" : "", ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RidgeModel> fit_ridge(const at::Tensor& X, absl::Span<const float> y, double lambda) {
  FROST_RETURN_IF_ERROR(check_matrix(X, "fit_ridge: X"));
  if (X.size(0) < 1 || X.size(1) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("fit_ridge: X is [", X.size(0), ", ", X.size(1),
                                                   "], needs at least one row and one column"));
  }
  FROST_RETURN_IF_ERROR(check_labels(y, X.size(0), "fit_ridge: y"));
  FROST_RETURN_IF_ERROR(check_lambda(lambda, "fit_ridge"));
  return torch_call([&] {
    return model_from(fit_fold(X.to(at::kCPU, at::kDouble).contiguous(), labels_tensor(y)), lambda);
  });
}

absl::StatusOr<RidgeModel> fit_ridge_cv(const at::Tensor& X, absl::Span<const float> y,
                                        std::vector<double> lambdas, int folds, uint64_t seed) {
  FROST_RETURN_IF_ERROR(check_matrix(X, "fit_ridge_cv: X"));
  const int64_t n = X.size(0);
  if (X.size(1) < 1) return absl::InvalidArgumentError("fit_ridge_cv: X has no columns");
  FROST_RETURN_IF_ERROR(check_labels(y, n, "fit_ridge_cv: y"));
  if (lambdas.empty()) return absl::InvalidArgumentError("fit_ridge_cv: no candidate lambdas");
  for (double l : lambdas) FROST_RETURN_IF_ERROR(check_lambda(l, "fit_ridge_cv"));
  if (folds < 2 || folds > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("fit_ridge_cv: folds=", folds, " must be in [2, N] with N=", n, " rows"));
  }
  return torch_call([&] {
    return fit_ridge_cv_impl(X.to(at::kCPU, at::kDouble).contiguous(), labels_tensor(y), lambdas, folds,
                             seed);
  });
}

absl::StatusOr<at::Tensor> ridge_predict(const RidgeModel& model, const at::Tensor& X) {
  if (!model.w.defined() || !model.x_mean.defined() || !model.x_scale.defined() || model.w.dim() != 1 ||
      !model.x_mean.sizes().equals(model.w.sizes()) || !model.x_scale.sizes().equals(model.w.sizes())) {
    return absl::InvalidArgumentError("ridge_predict: model is not fitted (w, x_mean, x_scale must be [D])");
  }
  FROST_RETURN_IF_ERROR(check_matrix(X, "ridge_predict: X"));
  if (X.size(1) != model.w.size(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ridge_predict: X has ", X.size(1), " columns but the model has D=", model.w.size(0)));
  }
  return torch_call([&] {
    const at::Tensor Z = (X.to(at::kCPU, at::kDouble) - model.x_mean) / model.x_scale;
    return at::matmul(Z, model.w.to(at::kDouble)) + model.bias;
  });
}

absl::StatusOr<KnnResult> knn_topk(const at::Tensor& train_keys, const at::Tensor& query_keys, int k,
                                   bool exclude_self) {
  FROST_RETURN_IF_ERROR(check_knn_args(train_keys, query_keys, k, exclude_self));
  return torch_call([&] { return knn_topk_impl(train_keys, query_keys, k, exclude_self); });
}

absl::StatusOr<at::Tensor> knn_predict(const at::Tensor& train_keys, absl::Span<const float> train_labels,
                                       const at::Tensor& query_keys, int k, bool exclude_self) {
  FROST_RETURN_IF_ERROR(check_knn_args(train_keys, query_keys, k, exclude_self));
  FROST_RETURN_IF_ERROR(check_labels(train_labels, train_keys.size(0), "knn_predict: train_labels"));
  return torch_call([&] {
    const KnnResult nn = knn_topk_impl(train_keys, query_keys, k, exclude_self);
    const at::Tensor w = nn.values.to(at::kDouble).clamp_min(0.0) + kKnnWeightFloor;  // [Q, k]
    const at::Tensor y =
        labels_tensor(train_labels).index_select(0, nn.indices.reshape({-1})).reshape(nn.indices.sizes());
    return (w * y).sum(1) / w.sum(1);
  });
}

}  // namespace frost::prototype
