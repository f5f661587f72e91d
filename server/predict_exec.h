#pragma once
// What Predict and the Open Inference Protocol's ModelInfer share: validating texts against the limits and
// the active prototype head (on the gRPC thread), and running the head (on the runtime's Predict executor).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/prototype/predictor.h"
#include "core/serving/prototype_kind.h"
#include "server/runtime.h"

namespace frost::server {

// A validated request: the texts, top_k, and the version it is served by (held until it returns).
struct PredictJob {
  std::vector<std::string> texts;
  int top_k = 0;
  std::shared_ptr<const serving::ServedPrototype> served;
};

// INVALID_ARGUMENT naming `texts_field` / `top_k_field` for empty or oversized texts and top_k outside [0, K];
// UNAVAILABLE while the model loads; FAILED_PRECONDITION when no prototype artifact is active. top_k unset =
// min(3, K).
absl::StatusOr<PredictJob> prepare_predict(Runtime* rt, std::vector<std::string> texts, std::optional<int> top_k,
                                           const std::string& texts_field, const std::string& top_k_field);

// The backbone forward and the head (call it on the Predict executor); records the Predict metrics.
absl::StatusOr<std::vector<prototype::Prediction>> run_predict(Runtime* rt, const PredictJob& job);

}  // namespace frost::server
