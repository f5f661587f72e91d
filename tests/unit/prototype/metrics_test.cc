// regression_metrics / average_ranks against hand-computed values and invariances.
#include "core/prototype/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/testing/test_util.h"

namespace frost::prototype {
namespace {

RegressionMetrics metrics_ok(const std::vector<double>& p, const std::vector<double>& t) {
  auto m = regression_metrics(p, t);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : RegressionMetrics{};
}

TEST(MetricsTest, AverageRanksWithTies) {
  EXPECT_EQ(average_ranks(std::vector<double>{10, 20, 20, 5}), (std::vector<double>{2, 3.5, 3.5, 1}));
  EXPECT_EQ(average_ranks(std::vector<double>{7, 7, 7}), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(average_ranks(std::vector<double>{3, 1, 2}), (std::vector<double>{3, 1, 2}));
  EXPECT_EQ(average_ranks(std::vector<double>{1, 2, 2, 2, 0}), (std::vector<double>{2, 4, 4, 4, 1}));
  EXPECT_TRUE(average_ranks(std::vector<double>{}).empty());
}

TEST(MetricsTest, HandComputed) {
  // pred = {1, 2, 3, 4}, truth = {1, 3, 2, 5}: errors {0, -1, 1, -1}.
  const RegressionMetrics m = metrics_ok({1, 2, 3, 4}, {1, 3, 2, 5});
  EXPECT_EQ(m.n, 4);
  EXPECT_DOUBLE_EQ(m.mae, 0.75);
  EXPECT_DOUBLE_EQ(m.rmse, std::sqrt(0.75));
  // Centred: p = {-1.5, -.5, .5, 1.5}, t = {-1.75, .25, -.75, 2.25}: sxy = 5.5, sxx = 5, syy = 8.75.
  EXPECT_NEAR(m.pearson, 5.5 / std::sqrt(5.0 * 8.75), 1e-12);
  // Ranks of truth {1, 3, 2, 4}: sum d^2 = 2 -> 1 - 6*2/(4*15) = 0.8.
  EXPECT_NEAR(m.spearman, 0.8, 1e-12);
}

TEST(MetricsTest, SpearmanWithTies) {
  // pred = {1, 2, 2, 3}: ranks {1, 2.5, 2.5, 4}; truth = {1, 2, 3, 4}: ranks {1, 2, 3, 4}.
  // Centred: {-1.5, 0, 0, 1.5} and {-1.5, -.5, .5, 1.5}: sxy = 4.5, sxx = 4.5, syy = 5.
  const RegressionMetrics m = metrics_ok({1, 2, 2, 3}, {1, 2, 3, 4});
  EXPECT_NEAR(m.spearman, 4.5 / std::sqrt(4.5 * 5.0), 1e-12);
  // Pearson of the raw values is the same here (pred is linear in its ranks).
  EXPECT_NEAR(m.pearson, m.spearman, 1e-12);
  // Ties on both sides: pred {1, 1, 2, 2}, truth {5, 5, 1, 1}: perfectly anti-ordered.
  EXPECT_NEAR(metrics_ok({1, 1, 2, 2}, {5, 5, 1, 1}).spearman, -1.0, 1e-12);
}

TEST(MetricsTest, PerfectAndAnti) {
  const RegressionMetrics m = metrics_ok({1, 2, 3}, {1, 2, 3});
  EXPECT_EQ(m.mae, 0.0);
  EXPECT_EQ(m.rmse, 0.0);
  EXPECT_DOUBLE_EQ(m.pearson, 1.0);
  EXPECT_DOUBLE_EQ(m.spearman, 1.0);
  const RegressionMetrics a = metrics_ok({3, 2, 1}, {1, 2, 3});
  EXPECT_DOUBLE_EQ(a.pearson, -1.0);
  EXPECT_DOUBLE_EQ(a.spearman, -1.0);
}

TEST(MetricsTest, ZeroVarianceGivesZeroCorrelation) {
  const RegressionMetrics m = metrics_ok({3, 3, 3}, {1, 2, 4});
  EXPECT_EQ(m.pearson, 0.0);
  EXPECT_EQ(m.spearman, 0.0);
  EXPECT_DOUBLE_EQ(m.mae, (2.0 + 1.0 + 1.0) / 3.0);
  EXPECT_EQ(metrics_ok({1, 2, 4}, {0.1, 0.1, 0.1}).pearson, 0.0);  // 0.1 is inexact; still exactly 0
  const RegressionMetrics one = metrics_ok({2}, {5});
  EXPECT_EQ(one.n, 1);
  EXPECT_EQ(one.pearson, 0.0);
  EXPECT_EQ(one.spearman, 0.0);
  EXPECT_DOUBLE_EQ(one.rmse, 3.0);
}

TEST(MetricsTest, Invariances) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd;
  std::vector<double> p(200), t(200);
  for (size_t i = 0; i < p.size(); ++i) {
    t[i] = nd(rng);
    p[i] = t[i] + 0.8 * nd(rng);
  }
  const RegressionMetrics base = metrics_ok(p, t);
  EXPECT_GT(base.pearson, 0.5);

  // Spearman is invariant under strictly increasing transforms; Pearson under positive affine ones.
  std::vector<double> mono(p.size()), affine(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    mono[i] = std::exp(2.0 * p[i]) + p[i] * p[i] * p[i];
    affine[i] = 3.0 * p[i] - 10.0;
  }
  EXPECT_NEAR(metrics_ok(mono, t).spearman, base.spearman, 1e-12);
  EXPECT_NEAR(metrics_ok(affine, t).pearson, base.pearson, 1e-12);
  EXPECT_NEAR(metrics_ok(affine, t).spearman, base.spearman, 1e-12);
  // Symmetric in its arguments (correlations, errors).
  const RegressionMetrics swapped = metrics_ok(t, p);
  EXPECT_NEAR(swapped.pearson, base.pearson, 1e-12);
  EXPECT_NEAR(swapped.spearman, base.spearman, 1e-12);
  EXPECT_NEAR(swapped.rmse, base.rmse, 1e-12);
  // Negating one side flips the sign.
  std::vector<double> neg(p.size());
  for (size_t i = 0; i < p.size(); ++i) neg[i] = -p[i];
  EXPECT_NEAR(metrics_ok(neg, t).spearman, -base.spearman, 1e-12);
  // A large offset does not cost precision (two-pass sums).
  std::vector<double> shifted(p.size());
  for (size_t i = 0; i < p.size(); ++i) shifted[i] = p[i] + 1e8;
  EXPECT_NEAR(metrics_ok(shifted, t).pearson, base.pearson, 1e-7);
}

TEST(MetricsTest, Errors) {
  EXPECT_INVALID(regression_metrics(std::vector<double>{1, 2}, std::vector<double>{1}).status(),
                 "pred has 2 values but truth has 1");
  EXPECT_INVALID(regression_metrics({}, {}).status(), "no values");
  EXPECT_INVALID(regression_metrics(std::vector<double>{1, std::nan("")}, std::vector<double>{1, 2}).status(),
                 "pred[1] = nan is not finite");
  EXPECT_INVALID(regression_metrics(std::vector<double>{1, 2},
                                    std::vector<double>{std::numeric_limits<double>::infinity(), 2})
                     .status(),
                 "truth[0] = inf is not finite");
}

TEST(MetricsTest, ToJson) {
  const nlohmann::json j = to_json(metrics_ok({1, 2, 3, 4}, {1, 3, 2, 5}));
  EXPECT_EQ(j.at("n").get<int64_t>(), 4);
  EXPECT_DOUBLE_EQ(j.at("mae").get<double>(), 0.75);
  EXPECT_NEAR(j.at("spearman").get<double>(), 0.8, 1e-12);
  EXPECT_TRUE(j.contains("rmse"));
  EXPECT_TRUE(j.contains("pearson"));
  EXPECT_EQ(j.size(), 5u);
}

}  // namespace
}  // namespace frost::prototype
