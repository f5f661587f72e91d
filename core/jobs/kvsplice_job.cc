#include "core/jobs/kvsplice_job.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/jobs/text_job_spec.h"
#include "core/serving/kvsplice_kind.h"
#include "core/train/kvsplice_train.h"

namespace frost::jobs {

namespace {

using nlohmann::json;

struct LoadedSpec {
  KvSpliceConfig cfg;
  TextJobSpec text;
};

absl::StatusOr<LoadedSpec> load_spec(const KvSpliceJobSpec& spec, const KvSpliceJobOptions& o,
                                     KvSpliceJobSpec* norm) {
  LoadedSpec ls;
  FROST_ASSIGN_OR_RETURN(ls.text, parse_text_job_spec(spec, o.data_root));
  for (const auto& [k, v] : ls.text.config) FROST_RETURN_IF_ERROR(set_kvsplice_field(ls.cfg, k, v));
  FROST_RETURN_IF_ERROR(validate_kvsplice_config(ls.cfg, o.model->config));
  FROST_RETURN_IF_ERROR(
      check_text_job_windows(ls.text, *o.model->tokenizer, ls.cfg.window, ls.cfg.self_sample_windows));
  if (norm) {
    FROST_ASSIGN_OR_RETURN(*norm, normalised_text_job_spec<KvSpliceJobSpec>(ls.text, kvsplice_config_json(ls.cfg)));
  }
  return ls;
}

json eval_json(const KvEval& e, const KvEval& fp16) {
  return {
      {"ppl", e.ppl}, {"mean_kl", e.mean_kl}, {"ppl_vs_fp16", fp16.ppl > 0 ? e.ppl / fp16.ppl - 1.0 : 0.0}};
}

}  // namespace

absl::StatusOr<JobSpec> KvSpliceJobKind::prepare(const JobSpec& spec) {
  const auto* s = std::get_if<KvSpliceJobSpec>(&spec);
  if (!s) return absl::InvalidArgumentError("kvsplice: not a kvsplice job spec");
  KvSpliceJobSpec norm;
  FROST_RETURN_IF_ERROR(load_spec(*s, opts_, &norm).status());
  return JobSpec(std::move(norm));
}

absl::StatusOr<JobResult> KvSpliceJobKind::run(const JobRecord& job, const JobContext& ctx) {
  const auto* spec = std::get_if<KvSpliceJobSpec>(&job.spec);
  if (!spec) return absl::InternalError("kvsplice: the job's spec is not a kvsplice job spec");
  FROST_ASSIGN_OR_RETURN(LoadedSpec ls, load_spec(*spec, opts_, nullptr));
  const LoadedModel& m = *opts_.model;
  const Transformer& model = *m.model;
  FROST_ASSIGN_OR_RETURN(
      JobWindows jw, make_job_windows(ls.text, m, ls.cfg.window, ls.text.counts.calib_windows,
                                      ls.text.counts.eval_windows, ls.cfg.self_sample_windows, ls.cfg.seed));
  auto stage = [&](const char* name) {
    if (ctx.progress) ctx.progress(JobProgress{name, 0, 0, 0, ls.cfg.steps});
  };

  // 1. Fisher analysis of the attention on calibration windows; its suggested rank is the default.
  stage("fisher");
  const size_t n_fisher = std::min(jw.calib.size(), static_cast<size_t>(ls.text.counts.fisher_windows));
  FROST_ASSIGN_OR_RETURN(
      FisherAccumulator acc,
      accumulate_fisher(model, std::vector<TokenWindow>(jw.calib.begin(), jw.calib.begin() + n_fisher)));
  FROST_ASSIGN_OR_RETURN(FisherReport fisher, acc.finish());
  FROST_ASSIGN_OR_RETURN(int64_t suggested, fisher.suggested_rank(ls.cfg.fisher_threshold));
  FROST_ASSIGN_OR_RETURN(json fisher_json, fisher.to_json(ls.cfg.fisher_threshold));
  const int64_t d = model.config().n_head_kv * model.config().head_dim;
  KvSpliceConfig cfg = ls.cfg;
  // the suggestion fills rank; k_rank / v_rank, when set, still override it for K or V
  const bool from_fisher = cfg.rank == 0 && (cfg.k_rank == 0 || cfg.v_rank == 0);
  if (cfg.rank == 0) cfg.rank = std::clamp<int64_t>(suggested, 1, d);

  // 2. PCA initialisation, then fine-tuning on next-token KL.
  stage("kvsplice");
  const KvRepairTrainOptions to = kv_train_options(ctx, "kvsplice");
  std::shared_ptr<KvSpliceSet> pca;
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<KvSpliceSet> set, train_kvsplice(model, cfg, jw.calib, to, &pca));

  // 3. held-out evaluation
  stage("evaluate");
  std::vector<KvEvalCase> cases = {KvEvalCase{}, KvEvalCase{KvCodecKind::kF16, {}, nullptr, nullptr, nullptr},
                                   KvEvalCase{KvCodecKind::kKvSplice, {}, nullptr, pca, nullptr},
                                   KvEvalCase{KvCodecKind::kKvSplice, {}, nullptr, set, nullptr}};
  std::shared_ptr<const FimKvSplice> fim;
  if (cfg.fim_rank > 0) {
    FROST_ASSIGN_OR_RETURN(FimKvSplice f, FimKvSplice::from_accumulator(acc, cfg.fim_rank));
    fim = std::make_shared<const FimKvSplice>(std::move(f));
    cases.push_back(KvEvalCase{KvCodecKind::kF32, {}, nullptr, nullptr, fim});
  }
  FROST_ASSIGN_OR_RETURN(std::vector<KvEval> ev, evaluate_kv(model, jw.eval, cases));
  const KvEval& fp16 = ev[1];
  const int64_t L = model.config().n_layer;
  json report = {{"job_id", job.id},
                 {"config", json::parse(kvsplice_config_json(ls.cfg))},
                 {"rank", cfg.rank},
                 {"k_rank", cfg.ranks().k},
                 {"v_rank", cfg.ranks().v},
                 {"latent", kv_latent_name(cfg.latent)},
                 {"rank_source", from_fisher ? "fisher" : "config"},
                 {"fisher", fisher_json},
                 {"calibration_windows", jw.calib.size()},
                 {"fisher_windows", n_fisher},
                 {"eval_windows", jw.eval.size()},
                 {"eval_source", ls.text.test_texts.empty() ? "sampled from the model" : "test_path"},
                 {"kv_bytes_per_token", {{"fp16", L * 2 * d * 2}, {"kvsplice", set->bytes_per_token()}}},
                 {"compression_vs_fp16", set->compression_vs_fp16()},
                 {"kvsplice_params", set->n_params()},
                 {"fp32", {{"ppl", ev[0].ppl}}},
                 {"fp16", eval_json(fp16, fp16)},
                 {"pca", eval_json(ev[2], fp16)},
                 {"kvsplice", eval_json(ev[3], fp16)}};
  if (fim) {
    json f = eval_json(ev[4], fp16);
    f["rank"] = cfg.fim_rank;
    f["window"] = cfg.window;
    f["note"] = "temporal compression of each window to fim_rank Fisher modes per head (evaluation only)";
    report["fim"] = f;
  }

  return publish_checked_artifact(*opts_.store, "kvsplice", job, m.name, report, serving::kKvSpliceFile,
                                  serving::kKvSpliceFormat, ls.text.activate, [&](const std::string& path) {
                                    return set->save(path, {{"model", m.name}});
                                  });
}

}  // namespace frost::jobs
