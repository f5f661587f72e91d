#pragma once
// Regression metrics for the prototype evaluation report.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace frost::prototype {

struct RegressionMetrics {
  int64_t n = 0;        // number of (pred, truth) pairs
  double mae = 0;       // mean |pred - truth|
  double rmse = 0;      // sqrt(mean (pred - truth)^2)
  double pearson = 0;   // linear correlation, in [-1, 1]
  double spearman = 0;  // Pearson of the average ranks (tied values share the mean of their ranks)
};

// Metrics of `pred` against `truth`, computed in double.
// Pearson and Spearman are defined as 0 (not NaN) when either side has zero variance (all its
// values equal, which includes n == 1): a constant predictor carries no ranking information, and a
// NaN would poison averages and JSON reports. Constant sides are detected by exact equality of the
// values, not by a variance threshold, so rounding in the mean cannot fake a correlation.
// INVALID_ARGUMENT when the sizes differ, are 0, or a value is not finite.
absl::StatusOr<RegressionMetrics> regression_metrics(absl::Span<const double> pred,
                                                     absl::Span<const double> truth);

// Average ranks (1-based) of `v`; equal values get the mean of the ranks they span, e.g.
// {10, 20, 20, 5} -> {2, 3.5, 3.5, 1}. Exposed for tests and reuse.
std::vector<double> average_ranks(absl::Span<const double> v);

// {"n", "mae", "rmse", "pearson", "spearman"}.
nlohmann::json to_json(const RegressionMetrics& m);

}  // namespace frost::prototype
