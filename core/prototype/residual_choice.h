#pragma once
// How much of the head's residual Predict serves on top of the linear probe (docs/prototype.md,
// "The residual scale"), chosen on the rows held out of training.
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace frost::prototype {

// A ranking gain below this on held-out rows is the rounding of a near-constant residual (one
// swapped pair moves Spearman by ~1e-8 at n = 800), not evidence that the head orders rows better.
inline constexpr double kMinSpearmanGain = 1e-3;

struct ResidualChoice {
  // "probe": ŷ = the probe (s = 0, c = 0).
  // "level": ŷ = σ(z_probe + c), c = s · mean(z_head): the head's learned level only. A constant in
  //          logit space keeps the probe's order of the rows, so Spearman is the probe's exactly.
  // "residual": ŷ = σ(z_probe + s · z_head): the head's input-dependent residual.
  std::string mode = "probe";
  double scale = 0;   // s applied to z_head at Predict (0 unless mode == "residual")
  double offset = 0;  // c added to z_probe at Predict (0 unless mode == "level")
  nlohmann::json grid = nlohmann::json::array();  // every candidate with its held-out figures
};

// z_probe, z_head: logits of the probe and the head on the held-out rows; truth: their labels;
// [a, b]: the label bounds. For s ∈ {0.1, …, 1} both the residual and the level candidate are
// measured. A candidate is supported when its mean per-row absolute-error gain over the probe
// exceeds one standard error of those paired gains; a residual candidate must in addition raise
// Spearman by at least kMinSpearmanGain. The supported candidate with the lowest MAE wins (a level
// candidate on an exact tie); none → the probe. INVALID_ARGUMENT on empty or mismatched inputs or
// non-finite values.
absl::StatusOr<ResidualChoice> choose_residual(absl::Span<const double> z_probe, absl::Span<const double> z_head,
                                               absl::Span<const double> truth, double a, double b);

}  // namespace frost::prototype
