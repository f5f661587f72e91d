#include "core/prototype/residual_choice.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/prototype/metrics.h"

namespace frost::prototype {

absl::StatusOr<ResidualChoice> choose_residual(absl::Span<const double> z_probe, absl::Span<const double> z_head,
                                               absl::Span<const double> truth, double a, double b) {
  const size_t n = truth.size();
  if (n == 0 || z_probe.size() != n || z_head.size() != n)
    return absl::InvalidArgumentError(absl::StrCat("choose_residual: sizes ", z_probe.size(), ", ", z_head.size(),
                                                   ", ", n, " must be equal and non-zero"));
  double zbar = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(z_probe[i]) || !std::isfinite(z_head[i]))
      return absl::InvalidArgumentError(absl::StrCat("choose_residual: row ", i, " has a non-finite logit"));
    zbar += z_head[i] / static_cast<double>(n);
  }
  // ŷ for the logit offset c_i = s·z_head[i] (residual) or s·z̄ (level)
  auto predict = [&](double s, bool level) {
    std::vector<double> p(n);
    for (size_t i = 0; i < n; ++i) {
      const double x = z_probe[i] + s * (level ? zbar : z_head[i]);
      p[i] = a + (b - a) / (1.0 + std::exp(-x));
    }
    return p;
  };
  const std::vector<double> p0 = predict(0.0, false);
  FROST_ASSIGN_OR_RETURN(RegressionMetrics probe, regression_metrics(p0, truth));
  ResidualChoice out;
  double best_mae = probe.mae;
  for (int k = 1; k <= 10; ++k) {
    const double s = k / 10.0;
    for (const bool level : {true, false}) {
      const std::vector<double> p = predict(s, level);
      FROST_ASSIGN_OR_RETURN(RegressionMetrics m, regression_metrics(p, truth));
      double mean = 0, sq = 0;
      std::vector<double> g(n);
      for (size_t i = 0; i < n; ++i) {
        g[i] = std::abs(p0[i] - truth[i]) - std::abs(p[i] - truth[i]);
        mean += g[i] / static_cast<double>(n);
      }
      for (size_t i = 0; i < n; ++i) sq += (g[i] - mean) * (g[i] - mean);
      const double se = std::sqrt(sq / std::max(1.0, static_cast<double>(n) - 1) / static_cast<double>(n));
      const bool supported = mean > se && (level || m.spearman >= probe.spearman + kMinSpearmanGain);
      out.grid.push_back({{"mode", level ? "level" : "residual"},
                          {"scale", s},
                          {"mae", m.mae},
                          {"spearman", m.spearman},
                          {"gain", mean},
                          {"gain_se", se},
                          {"supported", supported}});
      if (supported && m.mae < best_mae) {
        best_mae = m.mae;
        out.mode = level ? "level" : "residual";
        out.scale = level ? 0.0 : s;
        out.offset = level ? s * zbar : 0.0;
      }
    }
  }
  return out;
}

}  // namespace frost::prototype
