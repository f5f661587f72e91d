// fit_ridge / fit_ridge_cv / ridge_predict and knn_topk / knn_predict against brute force.
#include "core/prototype/baselines.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "tests/testing/test_util.h"

namespace frost::prototype {
namespace {

std::vector<float> to_vec(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// X [n, d] double with columns of very different scales and offsets.
at::Tensor design(int64_t n, int64_t d, uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor scale = at::pow(10.0, at::arange(d, at::kDouble) % 5 - 2);  // 0.01 .. 100
  const at::Tensor offset = at::arange(d, at::kDouble) * 3.0 - 7.0;
  return at::randn({n, d}, at::kDouble) * scale + offset;
}

// The ridge solution from the normal equations on standardized features, independently of the
// eigendecomposition path: (Z^T Z + lambda I) w = Z^T (y - mean(y)).
at::Tensor brute_force_w(const at::Tensor& X, const std::vector<float>& y, double lambda) {
  const at::Tensor Xd = X.to(at::kDouble);
  const at::Tensor mean = Xd.mean(0);
  at::Tensor sd = Xd.std(0, /*unbiased=*/false);
  sd = at::where(sd < 1e-9, at::ones_like(sd), sd);
  const at::Tensor Z = (Xd - mean) / sd;
  const at::Tensor yt = at::tensor(std::vector<double>(y.begin(), y.end()), at::kDouble);
  const at::Tensor A = at::matmul(Z.t(), Z) + lambda * at::eye(X.size(1), at::kDouble);
  return at::linalg_solve(A, at::matmul(Z.t(), yt - yt.mean()));
}

// ---- ridge --------------------------------------------------------------------------------

TEST(RidgeTest, RecoversExactLinearFunction) {
  const at::Tensor X = design(200, 6, 1);
  const at::Tensor beta = at::tensor({0.5, -2.0, 0.03, 1.5, -0.25, 4.0}, at::kDouble);
  const std::vector<float> y = to_vec(at::matmul(X, beta) + 3.0);

  auto m = fit_ridge(X, y, 1e-9);
  ASSERT_TRUE(m.ok()) << m.status();
  auto pred = ridge_predict(*m, X);
  ASSERT_TRUE(pred.ok()) << pred.status();
  ASSERT_EQ(pred->dim(), 1);
  EXPECT_EQ(pred->scalar_type(), at::kDouble);
  const at::Tensor yt = at::tensor(std::vector<double>(y.begin(), y.end()), at::kDouble);
  EXPECT_TENSOR_NEAR(*pred, yt, 1e-3);  // y itself is rounded to float
  // Raw-space coefficients w / x_scale recover beta.
  EXPECT_TENSOR_NEAR(m->w / m->x_scale, beta, 1e-4);
  EXPECT_TRUE(std::isnan(m->cv_rmse));
  EXPECT_TRUE(m->cv_rmse_by_lambda.empty());

  // Float input gives the same fit (converted to double inside).
  auto mf = fit_ridge(X.to(at::kFloat), y, 1e-9);
  ASSERT_TRUE(mf.ok()) << mf.status();
  EXPECT_TENSOR_NEAR(mf->w / mf->x_scale, beta, 1e-2);

  // On clean data CV picks the smallest candidate.
  auto cv = fit_ridge_cv(X, y);
  ASSERT_TRUE(cv.ok()) << cv.status();
  EXPECT_EQ(cv->lambda, 1e-3);
  EXPECT_LT(cv->cv_rmse, 1e-2);
}

TEST(RidgeTest, MatchesNormalEquations) {
  for (auto [n, d] : {std::pair<int64_t, int64_t>{80, 12}, {20, 50}}) {  // primal and dual (D > N) paths
    SCOPED_TRACE(::testing::Message() << "N=" << n << " D=" << d);
    const at::Tensor X = design(n, d, 2);
    at::manual_seed(3);
    const std::vector<float> y = to_vec(at::randn({n}, at::kDouble));
    for (double lambda : {1e-2, 1.0, 30.0}) {
      auto m = fit_ridge(X, y, lambda);
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_TENSOR_NEAR(m->w, brute_force_w(X, y, lambda), 1e-8);
      EXPECT_NEAR(m->bias, std::accumulate(y.begin(), y.end(), 0.0) / n, 1e-12);
      EXPECT_EQ(m->lambda, lambda);
    }
  }
}

TEST(RidgeTest, ScaleInvariantAndConstantColumns) {
  const at::Tensor X = design(60, 4, 4);
  at::manual_seed(5);
  const std::vector<float> y = to_vec(at::randn({60}, at::kDouble));
  auto a = fit_ridge(X, y, 1.0);
  ASSERT_TRUE(a.ok()) << a.status();
  // Rescaling and shifting the features does not change the predictions.
  const at::Tensor X2 = X * at::tensor({1e3, 1e-3, 7.0, 1.0}, at::kDouble) + 11.0;
  auto b = fit_ridge(X2, y, 1.0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TENSOR_NEAR(*ridge_predict(*a, X), *ridge_predict(*b, X2), 1e-9);

  // A constant column (0.1 is inexact, so its computed std is rounding noise) gets scale 1 and ~0 weight.
  const at::Tensor Xc = at::cat({X, at::full({60, 1}, 0.1, at::kDouble)}, 1);
  auto c = fit_ridge(Xc, y, 1.0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->x_scale[4].item<double>(), 1.0);
  EXPECT_LT(std::abs(c->w[4].item<double>()), 1e-9);
  EXPECT_TENSOR_NEAR(*ridge_predict(*c, Xc), *ridge_predict(*a, X), 1e-9);
}

TEST(RidgeTest, CvPicksLargerLambdaOnNoisyHighDimensionalData) {
  const int64_t n = 100, d = 80;
  const at::Tensor X = design(n, d, 6);
  at::manual_seed(7);
  const at::Tensor Z = (X - X.mean(0)) / X.std(0);
  const at::Tensor signal = at::matmul(Z, at::randn({d}, at::kDouble)) * 0.05;
  const std::vector<float> noisy = to_vec(signal + at::randn({n}, at::kDouble));
  const std::vector<float> clean = to_vec(signal * 20.0);

  auto mn = fit_ridge_cv(X, noisy);
  auto mc = fit_ridge_cv(X, clean);
  ASSERT_TRUE(mn.ok()) << mn.status();
  ASSERT_TRUE(mc.ok()) << mc.status();
  EXPECT_GE(mn->lambda, 10.0);
  EXPECT_EQ(mc->lambda, 1e-3);
  EXPECT_GT(mn->lambda, mc->lambda);

  // The report: one entry per candidate, in order; the chosen one has the minimum.
  ASSERT_EQ(mn->cv_rmse_by_lambda.size(), 6u);
  EXPECT_EQ(mn->cv_rmse_by_lambda[0].first, 1e-3);
  EXPECT_EQ(mn->cv_rmse_by_lambda[5].first, 100.0);
  for (const auto& [lambda, rmse] : mn->cv_rmse_by_lambda) EXPECT_GE(rmse, mn->cv_rmse) << lambda;

  // Deterministic: same seed, same result; another seed, other folds.
  auto again = fit_ridge_cv(X, noisy);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->cv_rmse_by_lambda, mn->cv_rmse_by_lambda);
  auto other = fit_ridge_cv(X, noisy, {1e-3, 1e-2, 1e-1, 1, 10, 100}, 5, /*seed=*/99);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->cv_rmse_by_lambda, mn->cv_rmse_by_lambda);

  // Leave-one-out (folds = N) works and a single candidate is simply used.
  auto loo = fit_ridge_cv(X, noisy, {3.0}, static_cast<int>(n));
  ASSERT_TRUE(loo.ok()) << loo.status();
  EXPECT_EQ(loo->lambda, 3.0);
  EXPECT_TENSOR_NEAR(loo->w, fit_ridge(X, noisy, 3.0)->w, 1e-12);
}

TEST(RidgeTest, CvRmseMatchesManualLeaveOneOut) {
  // With folds = N every fold is one row whatever the permutation, so CV RMSE can be recomputed
  // from fit_ridge on the other rows.
  const int64_t n = 12;
  const at::Tensor X = design(n, 3, 8);
  at::manual_seed(9);
  const std::vector<float> y = to_vec(at::randn({n}, at::kDouble));
  auto cv = fit_ridge_cv(X, y, {0.5}, static_cast<int>(n));
  ASSERT_TRUE(cv.ok()) << cv.status();
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> keep;
    std::vector<float> yk;
    for (int64_t j = 0; j < n; ++j) {
      if (j != i) {
        keep.push_back(j);
        yk.push_back(y[j]);
      }
    }
    auto m = fit_ridge(X.index_select(0, at::tensor(keep, at::kLong)), yk, 0.5);
    ASSERT_TRUE(m.ok()) << m.status();
    const double p = ridge_predict(*m, X.slice(0, i, i + 1))->item<double>();
    sq += (p - y[i]) * (p - y[i]);
  }
  EXPECT_NEAR(cv->cv_rmse, std::sqrt(sq / n), 1e-10);
}

TEST(RidgeTest, Errors) {
  const at::Tensor X = design(10, 3, 1);
  const std::vector<float> y(10, 1.0f);
  EXPECT_INVALID(fit_ridge_cv(at::ones({10}), y).status(), "expected a 2-D tensor");
  EXPECT_INVALID(fit_ridge_cv(at::ones({10, 3}, at::kLong), y).status(), "is not float or double");
  EXPECT_INVALID(fit_ridge_cv(at::Tensor(), y).status(), "undefined");
  EXPECT_INVALID(fit_ridge_cv(X, std::vector<float>(9, 1.0f)).status(), "9 labels for 10 rows");
  std::vector<float> ynan = y;
  ynan[4] = std::nanf("");
  EXPECT_INVALID(fit_ridge_cv(X, ynan).status(), "label[4] = nan is not finite");
  at::Tensor Xnan = X.clone();
  Xnan[2][1] = std::nan("");
  EXPECT_INVALID(fit_ridge_cv(Xnan, y).status(), "NaN or infinite");
  EXPECT_INVALID(fit_ridge_cv(X, y, {}).status(), "no candidate lambdas");
  EXPECT_INVALID(fit_ridge_cv(X, y, {1.0, 0.0}).status(), "lambda 0 must be finite and > 0");
  EXPECT_INVALID(fit_ridge_cv(X, y, {1.0}, 1).status(), "folds=1 must be in [2, N]");
  EXPECT_INVALID(fit_ridge_cv(X, y, {1.0}, 11).status(), "folds=11");
  EXPECT_INVALID(fit_ridge(X, y, -1.0).status(), "lambda -1");
  EXPECT_INVALID(fit_ridge(at::ones({0, 3}), {}, 1.0).status(), "needs at least one row");

  auto m = fit_ridge(X, y, 1.0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_INVALID(ridge_predict(*m, design(4, 2, 1)).status(), "X has 2 columns but the model has D=3");
  EXPECT_INVALID(ridge_predict(RidgeModel{}, X).status(), "model is not fitted");
  auto empty = ridge_predict(*m, at::ones({0, 3}));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->numel(), 0);
}

// ---- k-NN ---------------------------------------------------------------------------------

// Brute force in double: for each query, all training rows sorted by (cos desc, index asc).
std::vector<std::vector<std::pair<double, int64_t>>> brute_force_neighbours(const at::Tensor& train,
                                                                            const at::Tensor& query,
                                                                            bool exclude_self) {
  const at::Tensor T = train.to(at::kDouble), Q = query.to(at::kDouble);
  std::vector<std::vector<std::pair<double, int64_t>>> out(Q.size(0));
  for (int64_t q = 0; q < Q.size(0); ++q) {
    for (int64_t j = 0; j < T.size(0); ++j) {
      if (exclude_self && j == q) continue;
      const double nq = Q[q].norm().item<double>(), nt = T[j].norm().item<double>();
      const double dot = (Q[q] * T[j]).sum().item<double>();
      out[q].emplace_back(nq > 0 && nt > 0 ? dot / (nq * nt) : 0.0, j);
    }
    std::sort(out[q].begin(), out[q].end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
  }
  return out;
}

TEST(KnnTest, TopkMatchesBruteForce) {
  at::manual_seed(11);
  const at::Tensor train = at::randn({120, 8}, at::kFloat) * 3.0;
  const at::Tensor query = at::randn({30, 8}, at::kDouble);
  for (bool exclude_self : {false, true}) {
    const at::Tensor q = exclude_self ? train : query;
    auto r = knn_topk(train, q, 5, exclude_self);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->values.sizes(), (std::vector<int64_t>{q.size(0), 5}));
    EXPECT_EQ(r->values.scalar_type(), at::kFloat);
    EXPECT_EQ(r->indices.scalar_type(), at::kLong);
    const auto bf = brute_force_neighbours(train, q, exclude_self);
    for (int64_t i = 0; i < q.size(0); ++i) {
      for (int j = 0; j < 5; ++j) {
        EXPECT_EQ(r->indices[i][j].item<int64_t>(), bf[i][j].second) << "query " << i << " rank " << j;
        EXPECT_NEAR(r->values[i][j].item<float>(), bf[i][j].first, 1e-5);
      }
      if (exclude_self) {
        for (int j = 0; j < 5; ++j) EXPECT_NE(r->indices[i][j].item<int64_t>(), i);
      }
    }
  }
}

TEST(KnnTest, ChunkedEqualsOneByOne) {
  // 2500 queries: three chunks of at most 1024 rows.
  at::manual_seed(12);
  const at::Tensor train = at::randn({40, 6});
  const at::Tensor query = at::randn({2500, 6});
  auto all = knn_topk(train, query, 3);
  ASSERT_TRUE(all.ok()) << all.status();
  for (int64_t i : {0, 1023, 1024, 2047, 2048, 2499}) {
    auto one = knn_topk(train, query.slice(0, i, i + 1), 3);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_TRUE(at::equal(one->indices[0], all->indices[i])) << i;
    EXPECT_TENSOR_NEAR(one->values[0], all->values[i], 1e-6);
  }
}

TEST(KnnTest, TiesGoToLowerIndexAndZeroRows) {
  // Rows 1, 2, 4 are the same direction (different lengths); row 3 is zero.
  const at::Tensor train =
      at::tensor({1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f, 5.0f}).reshape({5, 2});
  auto r = knn_topk(train, at::tensor({0.0f, 3.0f}).reshape({1, 2}), 3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(at::equal(r->indices[0], at::tensor({1, 2, 4}, at::kLong)));
  auto self = knn_topk(train, train, 3, /*exclude_self=*/true);
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_TRUE(at::equal(self->indices[2], at::tensor({1, 4, 0}, at::kLong)))  // cos 1, 1, then 0 (0 < 3)
      << self->indices;
  // The zero row has similarity 0 to everything: its neighbours are the lowest indices.
  EXPECT_TRUE(at::equal(self->indices[3], at::tensor({0, 1, 2}, at::kLong))) << self->indices;
  EXPECT_EQ(self->values[3][0].item<float>(), 0.0f);
}

TEST(KnnTest, PredictWeightsAndDegenerateMean) {
  at::manual_seed(13);
  const at::Tensor train = at::randn({50, 4});
  const at::Tensor query = at::randn({7, 4}, at::kDouble);
  std::vector<float> labels(50);
  for (int i = 0; i < 50; ++i) labels[i] = static_cast<float>(i % 7) * 0.5f + 1.0f;
  auto pred = knn_predict(train, labels, query, 4);
  ASSERT_TRUE(pred.ok()) << pred.status();
  ASSERT_EQ(pred->sizes(), (std::vector<int64_t>{7}));
  EXPECT_EQ(pred->scalar_type(), at::kDouble);
  const auto bf = brute_force_neighbours(train, query, false);
  for (int64_t q = 0; q < 7; ++q) {
    double num = 0, den = 0;
    for (int j = 0; j < 4; ++j) {
      const double w = std::max(bf[q][j].first, 0.0) + 1e-6;
      num += w * labels[bf[q][j].second];
      den += w;
    }
    EXPECT_NEAR((*pred)[q].item<double>(), num / den, 1e-5) << q;
  }

  // k = 1 returns the nearest label; all-negative similarities give the plain mean.
  const at::Tensor t2 = at::tensor({1.0f, 0.0f, 0.8f, 0.6f, -1.0f, 0.0f, -0.6f, -0.8f}).reshape({4, 2});
  const std::vector<float> y2 = {2, 3, 4, 6};
  EXPECT_DOUBLE_EQ(knn_predict(t2, y2, at::tensor({0.9f, 0.1f}).reshape({1, 2}), 1)->item<double>(), 2.0);
  const double far = knn_predict(t2, y2, at::tensor({-1.0f, 0.0f}).reshape({1, 2}), 4)->item<double>();
  EXPECT_GT(far, 4.0);  // weighted towards the label-4 row (cos 1) ...
  auto neg = knn_predict(t2.slice(0, 0, 2), {2, 3}, at::tensor({-1.0f, -0.1f}).reshape({1, 2}), 2);
  ASSERT_TRUE(neg.ok()) << neg.status();
  EXPECT_NEAR(neg->item<double>(), 2.5, 1e-9);  // ... while two negative neighbours average plainly

  // Leave-one-out prediction over the training set itself.
  auto loo = knn_predict(train, labels, train, 3, /*exclude_self=*/true);
  ASSERT_TRUE(loo.ok()) << loo.status();
  EXPECT_EQ(loo->size(0), 50);
}

TEST(KnnTest, Errors) {
  const at::Tensor train = at::randn({5, 3});
  const std::vector<float> y(5, 1.0f);
  EXPECT_INVALID(knn_topk(train, at::randn({2, 3}), 0).status(), "k=0 must be in [1, 5]");
  EXPECT_INVALID(knn_topk(train, at::randn({2, 3}), 6).status(), "k=6 must be in [1, 5]");
  EXPECT_INVALID(knn_topk(train, train, 5, true).status(), "k=5 must be in [1, 4]");
  EXPECT_INVALID(knn_topk(train, at::randn({2, 3}), 1, true).status(), "Q=2 != N=5");
  EXPECT_INVALID(knn_topk(train, at::randn({2, 4}), 1).status(),
                 "train_keys have dim 3 but query_keys have dim 4");
  EXPECT_INVALID(knn_topk(train, at::randn({2}), 1).status(), "query_keys: expected a 2-D tensor");
  at::Tensor bad = train.clone();
  bad[0][0] = std::numeric_limits<float>::infinity();
  EXPECT_INVALID(knn_topk(bad, train, 1).status(), "train_keys: contains NaN or infinite");
  EXPECT_INVALID(knn_predict(train, std::vector<float>(4, 1.0f), train, 1).status(), "4 labels for 5 rows");
  EXPECT_INVALID(knn_predict(train, y, train, 9).status(), "k=9");
  auto none = knn_topk(train, at::randn({0, 3}), 2);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->indices.size(0), 0);
}

}  // namespace
}  // namespace frost::prototype
