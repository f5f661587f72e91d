#pragma once
// evaluate_prototype(): train on a dataset directory's train split, evaluate on its test split,
// next to baselines on the same backbone. What `frost-bench prototype` prints.
//
// Baselines (all fitted on the train split only):
//   train_mean         the constant mean training label
//   ridge_mean_pooled  ridge regression (lambda by 5-fold CV) on the backbone's mean-pooled
//                      final hidden states
//   knn_mean_pooled    k-NN (k = rlcs_k, cosine) on the same mean-pooled hidden states
//   knn_keycache       k-NN (k = rlcs_k, weights max(cos, 0) + 1e-6) of the query's learned key
//                      among the KeyCache: the RLCS neighbour estimate ŷ_knn
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/model_loader.h"
#include "core/prototype/config.h"
#include "core/prototype/data.h"
#include "core/prototype/metrics.h"
#include "core/prototype/trainer.h"

namespace frost::prototype {

// The plain verdict of the report: the head against the linear probe (ridge on the same mean-pooled
// features) on the test split.
struct ProbeVerdict {
  double mae_delta = 0;       // head MAE - probe MAE (< 0: the head is better)
  double spearman_delta = 0;  // head Spearman - probe Spearman
  bool trails = false;        // mae_delta > margin: worth a warning
  std::string text;           // "head beats / trails / matches the linear probe by ..."
};
// `margin` >= 0 in label units. MAE differences within 1e-6 "match" and never trail.
ProbeVerdict probe_verdict(const RegressionMetrics& head, const RegressionMetrics& probe, double margin);

struct EvalOptions {
  PrototypeConfig cfg;
  std::string artifact_dir;  // "" = a temporary directory, removed afterwards
  TrainHooks hooks;
  int top_k = 3;  // prototypes kept per test prediction (for the examples in the report)
};

// The report also holds "verdict" (probe_verdict with cfg.probe_margin) and, when the head trails
// the probe by more than the margin, "warnings": [the verdict text].
absl::StatusOr<nlohmann::ordered_json> evaluate_prototype(const LoadedModel& model, const DatasetDir& data,
                                                          const EvalOptions& opts);

}  // namespace frost::prototype
