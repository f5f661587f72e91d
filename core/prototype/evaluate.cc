#include "core/prototype/evaluate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/prototype/artifact.h"
#include "core/prototype/baselines.h"
#include "core/prototype/features.h"
#include "core/prototype/metrics.h"
#include "core/prototype/predictor.h"

namespace frost::prototype {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

absl::StatusOr<RegressionMetrics> metrics_of(const std::vector<double>& pred,
                                             const std::vector<float>& truth) {
  std::vector<double> t(truth.begin(), truth.end());
  return regression_metrics(pred, t);
}

absl::StatusOr<nlohmann::json> metrics_json(const std::vector<double>& pred,
                                            const std::vector<float>& truth) {
  FROST_ASSIGN_OR_RETURN(RegressionMetrics m, metrics_of(pred, truth));
  nlohmann::json j = to_json(m);
  // The spread of the predictions: a head collapsed toward the mean shows a std far below the labels'.
  double mean = 0, sq = 0;
  for (double p : pred) mean += p;
  mean /= static_cast<double>(pred.size());
  for (double p : pred) sq += (p - mean) * (p - mean);
  j["pred_std"] = std::sqrt(sq / static_cast<double>(pred.size()));
  return j;
}

}  // namespace

// MAE differences this small are the rounding of one prediction computed two ways (the head at
// s = 0 is the probe in fp32, the baseline runs in fp64).
constexpr double kMatchTolerance = 1e-6;

ProbeVerdict probe_verdict(const RegressionMetrics& head, const RegressionMetrics& probe, double margin) {
  ProbeVerdict v;
  v.mae_delta = head.mae - probe.mae;
  v.spearman_delta = head.spearman - probe.spearman;
  v.trails = v.mae_delta > std::max(margin, kMatchTolerance);
  const std::string sp = absl::StrFormat("Spearman %.4f vs %.4f", head.spearman, probe.spearman);
  if (std::abs(v.mae_delta) <= kMatchTolerance) {
    v.text = absl::StrFormat("head matches the linear probe (MAE %.4f; %s)", head.mae, sp);
  } else if (v.mae_delta < 0) {
    v.text = absl::StrFormat("head beats the linear probe by %.4f MAE (%.4f vs %.4f; %s)", -v.mae_delta,
                             head.mae, probe.mae, sp);
  } else {
    v.text = absl::StrFormat("head trails the linear probe by %.4f MAE (%.4f vs %.4f; %s)", v.mae_delta,
                             head.mae, probe.mae, sp);
  }
  if (v.trails)
    v.text +=
        absl::StrFormat(", more than the margin %.4f: the linear probe serves this dataset better", margin);
  return v;
}

absl::StatusOr<nlohmann::ordered_json> evaluate_prototype(const LoadedModel& model, const DatasetDir& data,
                                                          const EvalOptions& opts) {
  nlohmann::ordered_json out;
  out["dataset"] = data.name;
  out["model"] = model.name;
  out["n_train"] = data.train.size();
  out["n_test"] = data.test.size();
  out["bounds"] = {data.bounds.a, data.bounds.b};

  FROST_ASSIGN_OR_RETURN(auto trainer, PrototypeTrainer::create(model, data.train, data.bounds, opts.cfg));
  out["config"] = to_json(trainer->config());
  out["compute_device"] = trainer->device().name;
  const double t_train = now_s();
  FROST_ASSIGN_OR_RETURN(PrototypeArtifact art, trainer->run(opts.hooks));
  out["train_seconds"] = now_s() - t_train;

  // Artifact: saved and loaded back, so the figures below come from what Predict would serve.
  std::string dir = opts.artifact_dir;
  bool temp_dir = false;
  if (dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/frost_proto_XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      return absl::UnavailableError("cannot create a temporary artifact directory");
    dir = tmpl;
    temp_dir = true;
  }
  FROST_ASSIGN_OR_RETURN(int64_t art_bytes, save_artifact(art, dir));
  absl::StatusOr<PrototypeArtifact> loaded = load_artifact(dir);
  if (temp_dir) std::filesystem::remove_all(dir);
  if (!loaded.ok()) return loaded.status();
  out["artifact"] = {{"bytes", art_bytes}, {"dir", temp_dir ? "" : dir}, {"n_tensors", art.tensors.size()}};
  FROST_ASSIGN_OR_RETURN(auto predictor, Predictor::create(*std::move(loaded), model, trainer->device()));

  // Test features once (backbone), then the predictor and the baselines on them.
  FeatureCache::Options fo;
  fo.max_tokens = trainer->config().max_tokens;
  fo.budget_bytes = trainer->config().feature_cache_bytes;
  fo.spill_dir = trainer->config().spill_dir;
  fo.device = trainer->device().device;  // the test features beside the training ones
  double t0 = now_s();
  FROST_ASSIGN_OR_RETURN(auto test_fc, FeatureCache::build(model, data.test.texts, fo, opts.hooks.cancel));
  const double t_test_features = now_s() - t0;
  const int64_t Nt = data.test.size();
  std::vector<double> pred, pred0, knn;
  int64_t n_ood = 0, n_fallback = 0;
  double sum_pop = 0, sum_agree = 0, sum_reliance = 0, sum_top_weight = 0;
  nlohmann::json examples = nlohmann::json::array();
  t0 = now_s();
  for (int64_t s = 0; s < Nt; s += trainer->config().eval_batch) {
    std::vector<int64_t> idx;
    for (int64_t i = s; i < std::min(Nt, s + trainer->config().eval_batch); ++i) idx.push_back(i);
    FeatureBatch fb = test_fc->batch(idx);
    FROST_ASSIGN_OR_RETURN(std::vector<Prediction> ps,
                           predictor->predict_features(fb.h, fb.mask, opts.top_k));
    for (size_t j = 0; j < ps.size(); ++j) {
      const Prediction& p = ps[j];
      pred.push_back(p.value);
      pred0.push_back(p.value_unrefined);
      knn.push_back(p.knn_value);
      n_ood += p.out_of_distribution;
      n_fallback += p.restr_fallback;
      sum_pop += p.population_consistency;
      sum_agree += p.agreement_consistency;
      sum_reliance += p.label_reliance;
      sum_top_weight += *std::max_element(p.weights.begin(), p.weights.end());
      const int64_t i = idx[j];
      if (i < 3) {
        nlohmann::json top = nlohmann::json::array();
        for (const Attribution& a : p.top)
          top.push_back({{"index", a.index}, {"label", a.label}, {"weight", a.weight}, {"text", a.text}});
        examples.push_back({{"text", data.test.texts[static_cast<size_t>(i)]},
                            {"label", data.test.labels[static_cast<size_t>(i)]},
                            {"prediction", p.value},
                            {"population_consistency", p.population_consistency},
                            {"agreement_consistency", p.agreement_consistency},
                            {"label_reliance", p.label_reliance},
                            {"out_of_distribution", p.out_of_distribution},
                            {"top_prototypes", top}});
      }
    }
  }
  const double t_predict = now_s() - t0;

  // Baselines.
  double mean = 0;
  for (float y : data.train.labels) mean += y;
  mean /= static_cast<double>(data.train.size());
  std::vector<double> constant(static_cast<size_t>(Nt), mean);
  at::Tensor Xtr, Xte;
  FROST_RETURN_IF_ERROR(torch_call([&] {
    std::vector<at::Tensor> a, b;
    for (int64_t i = 0; i < trainer->features()->size(); ++i)
      a.push_back(trainer->features()->mean_pooled(i));
    for (int64_t i = 0; i < Nt; ++i) b.push_back(test_fc->mean_pooled(i));
    Xtr = at::stack(a).to(at::kCPU, at::kDouble);  // the baselines run on the CPU
    Xte = at::stack(b).to(at::kCPU, at::kDouble);
  }));
  FROST_ASSIGN_OR_RETURN(RidgeModel ridge, fit_ridge_cv(Xtr, data.train.labels));
  FROST_ASSIGN_OR_RETURN(at::Tensor ridge_pred_t, ridge_predict(ridge, Xte));
  std::vector<double> ridge_pred(static_cast<size_t>(Nt));
  for (int64_t i = 0; i < Nt; ++i)
    ridge_pred[static_cast<size_t>(i)] =
        std::clamp(ridge_pred_t[i].item<double>(), data.bounds.a, data.bounds.b);  // as the TF-IDF baseline

  FROST_ASSIGN_OR_RETURN(
      at::Tensor knn_pooled_t,
      knn_predict(Xtr, data.train.labels, Xte,
                  static_cast<int>(std::min<int64_t>(trainer->config().rlcs_k, data.train.size()))));
  std::vector<double> knn_pooled(knn_pooled_t.data_ptr<double>(), knn_pooled_t.data_ptr<double>() + Nt);
  FROST_ASSIGN_OR_RETURN(RegressionMetrics head_m, metrics_of(pred, data.test.labels));
  FROST_ASSIGN_OR_RETURN(RegressionMetrics probe_m, metrics_of(ridge_pred, data.test.labels));
  const ProbeVerdict verdict = probe_verdict(head_m, probe_m, trainer->config().probe_margin);

  nlohmann::ordered_json metrics;
  FROST_ASSIGN_OR_RETURN(metrics["prototype"], metrics_json(pred, data.test.labels));
  FROST_ASSIGN_OR_RETURN(metrics["prototype_unrefined"], metrics_json(pred0, data.test.labels));
  FROST_ASSIGN_OR_RETURN(metrics["knn_keycache"], metrics_json(knn, data.test.labels));
  FROST_ASSIGN_OR_RETURN(metrics["ridge_mean_pooled"], metrics_json(ridge_pred, data.test.labels));
  metrics["ridge_mean_pooled"]["lambda"] = ridge.lambda;
  FROST_ASSIGN_OR_RETURN(metrics["knn_mean_pooled"], metrics_json(knn_pooled, data.test.labels));
  FROST_ASSIGN_OR_RETURN(metrics["train_mean"], metrics_json(constant, data.test.labels));
  out["test_metrics"] = metrics;
  out["verdict"] = {{"text", verdict.text},
                    {"mae_delta", verdict.mae_delta},
                    {"spearman_delta", verdict.spearman_delta},
                    {"margin", trainer->config().probe_margin},
                    {"trails", verdict.trails}};
  if (verdict.trails) out["warnings"] = nlohmann::json::array({verdict.text});
  // What training measured on its held-out rows (val_fraction): Stage A's and Stage B's head, the
  // probe alone, and what Predict serves on top of the probe, chosen from them (mode, s, c).
  // The mode as the net serves it (without held-out rows nothing was chosen: s stays 1, the residual).
  const PrototypeNet& net = *trainer->net();
  const char* mode = !net.has_probe()            ? "none"
                     : net.probe_offset() != 0.0 ? "level"
                     : net.probe_scale() != 0.0  ? "residual"
                                                 : "probe";
  out["validation"] = {{"n_val", trainer->report().value("n_val", 0)},
                       {"probe", trainer->report().value("probe", nlohmann::json())},
                       {"stage_a", trainer->report().value("val_stage_a", nlohmann::json())},
                       {"stage_b", trainer->report().value("val_stage_b", nlohmann::json())},
                       {"mode", mode},
                       {"scale", net.probe_scale()},
                       {"offset", net.probe_offset()}};
  out["rlcs"] = {{"k", trainer->config().rlcs_k},
                 {"refined_mae", head_m.mae},
                 {"unrefined_mae", metrics["prototype_unrefined"]["mae"]},
                 {"ood_rate", static_cast<double>(n_ood) / static_cast<double>(Nt)},
                 {"restr_fallback_rate", static_cast<double>(n_fallback) / static_cast<double>(Nt)},
                 {"restr_fallback_rate_in_distribution",
                  Nt > n_ood ? static_cast<double>(n_fallback) / static_cast<double>(Nt - n_ood) : 0.0},
                 {"mean_population_consistency", sum_pop / static_cast<double>(Nt)},
                 {"mean_agreement_consistency", sum_agree / static_cast<double>(Nt)}};
  // How attribution behaves on the test split: the mean weight of the top prototype, and how far
  // ŷ moves when every prototype's label is hidden (Prediction::label_reliance).
  out["attribution"] = {{"mean_top_weight", sum_top_weight / static_cast<double>(Nt)},
                        {"mean_label_reliance", sum_reliance / static_cast<double>(Nt)}};
  out["stages"] = trainer->report().value("stages", nlohmann::json::object());
  out["stages"]["test_features"] = {{"seconds", t_test_features}};
  out["stages"]["predict"] = {{"seconds", t_predict},
                              {"texts_per_s", t_predict > 0 ? static_cast<double>(Nt) / t_predict : 0}};
  out["loss_history"] = {{"stage_a", trainer->report().value("stage_a_epoch_loss", nlohmann::json::array())},
                         {"stage_b", trainer->report().value("stage_b_epoch_loss", nlohmann::json::array())}};
  out["n_params"] = trainer->report().value("n_params", 0);
  out["feature_cache"] = trainer->report().value("feature_cache", nlohmann::json::object());
  out["examples"] = examples;
  return out;
}

}  // namespace frost::prototype
