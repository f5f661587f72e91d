// MAE, RMSE, Pearson and Spearman (average ranks) in double.
#include "core/prototype/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace frost::prototype {
namespace {

bool all_equal(absl::Span<const double> v) {
  return std::all_of(v.begin(), v.end(), [&](double x) { return x == v[0]; });
}

// Pearson correlation; 0 when either side is constant (see the header).
double pearson(absl::Span<const double> x, absl::Span<const double> y) {
  if (all_equal(x) || all_equal(y)) return 0.0;
  const double n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n;
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  // Two-pass (centred) sums: stable when the means are large relative to the spread.
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double dx = x[i] - mx, dy = y[i] - my;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx <= 0 || syy <= 0) return 0.0;  // underflow of tiny spreads
  // Rounding can push |r| a hair above 1.
  return std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
}

absl::Status check_finite(absl::Span<const double> v, const char* name) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("regression_metrics: ", name, "[", i, "] = ", v[i], " is not finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<double> average_ranks(absl::Span<const double> v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> ranks(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && v[order[j]] == v[order[i]]) ++j;
    // Positions i..j-1 (0-based) hold equal values: ranks i+1..j, mean (i + 1 + j) / 2.
    const double r = 0.5 * static_cast<double>(i + 1 + j);
    for (size_t k = i; k < j; ++k) ranks[order[k]] = r;
    i = j;
  }
  return ranks;
}

absl::StatusOr<RegressionMetrics> regression_metrics(absl::Span<const double> pred,
                                                     absl::Span<const double> truth) {
  if (pred.size() != truth.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("regression_metrics: pred has ", pred.size(), " values but truth has ", truth.size()));
  }
  if (pred.empty()) return absl::InvalidArgumentError("regression_metrics: no values (n = 0)");
  if (absl::Status s = check_finite(pred, "pred"); !s.ok()) return s;
  if (absl::Status s = check_finite(truth, "truth"); !s.ok()) return s;

  RegressionMetrics m;
  m.n = static_cast<int64_t>(pred.size());
  double abs_sum = 0, sq_sum = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    const double e = pred[i] - truth[i];
    abs_sum += std::fabs(e);
    sq_sum += e * e;
  }
  m.mae = abs_sum / static_cast<double>(m.n);
  m.rmse = std::sqrt(sq_sum / static_cast<double>(m.n));
  m.pearson = pearson(pred, truth);
  const std::vector<double> rp = average_ranks(pred), rt = average_ranks(truth);
  m.spearman = pearson(rp, rt);
  return m;
}

nlohmann::json to_json(const RegressionMetrics& m) {
  return nlohmann::json{
      {"n", m.n}, {"mae", m.mae}, {"rmse", m.rmse}, {"pearson", m.pearson}, {"spearman", m.spearman}};
}

}  // namespace frost::prototype
