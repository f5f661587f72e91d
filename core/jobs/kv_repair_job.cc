#include "core/jobs/kv_repair_job.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/jobs/state_dir.h"
#include "core/jobs/text_job_spec.h"
#include "core/serving/kv_repair_kind.h"
#include "core/train/repair_train.h"

namespace frost::jobs {

namespace {

using nlohmann::json;

struct LoadedSpec {
  KvRepairConfig cfg;
  TextJobSpec text;
};

// Parses and checks a spec; fills `norm` (absolute paths, every default explicit) when given.
absl::StatusOr<LoadedSpec> load_spec(const KvRepairJobSpec& spec, const KvRepairJobOptions& o,
                                     KvRepairJobSpec* norm) {
  LoadedSpec ls;
  FROST_ASSIGN_OR_RETURN(ls.text, parse_text_job_spec(spec, o.data_root));
  for (const auto& [k, v] : ls.text.config) FROST_RETURN_IF_ERROR(set_kv_repair_field(ls.cfg, k, v));
  FROST_RETURN_IF_ERROR(validate_kv_repair_config(ls.cfg, o.model->config));
  FROST_RETURN_IF_ERROR(
      check_text_job_windows(ls.text, *o.model->tokenizer, ls.cfg.window, ls.cfg.self_sample_windows));
  if (norm) {
    FROST_ASSIGN_OR_RETURN(*norm, normalised_text_job_spec<KvRepairJobSpec>(ls.text, kv_repair_config_json(ls.cfg)));
  }
  return ls;
}

}  // namespace

absl::StatusOr<JobSpec> KvRepairJobKind::prepare(const JobSpec& spec) {
  const auto* s = std::get_if<KvRepairJobSpec>(&spec);
  if (!s) return absl::InvalidArgumentError("kv_repair: not a kv_repair job spec");
  KvRepairJobSpec norm;
  FROST_RETURN_IF_ERROR(load_spec(*s, opts_, &norm).status());
  return JobSpec(std::move(norm));
}

absl::StatusOr<JobResult> KvRepairJobKind::run(const JobRecord& job, const JobContext& ctx) {
  const auto* spec = std::get_if<KvRepairJobSpec>(&job.spec);
  if (!spec) return absl::InternalError("kv_repair: the job's spec is not a kv_repair job spec");
  FROST_ASSIGN_OR_RETURN(LoadedSpec ls, load_spec(*spec, opts_, nullptr));
  const LoadedModel& m = *opts_.model;
  FROST_ASSIGN_OR_RETURN(
      JobWindows jw, make_job_windows(ls.text, m, ls.cfg.window, ls.text.counts.calib_windows,
                                      ls.text.counts.eval_windows, ls.cfg.self_sample_windows, ls.cfg.seed));
  const std::vector<TokenWindow>&calib = jw.calib, &eval = jw.eval;

  const KvRepairTrainOptions to = kv_train_options(ctx, "kv_repair");
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<RepairSet> set, train_kv_repair(*m.model, ls.cfg, calib, to));

  // held-out evaluation: clean fp32, the codec (+ corruption) without and with repair
  if (ctx.progress) ctx.progress(JobProgress{"evaluate", 0, 0, 0, 3});
  FROST_ASSIGN_OR_RETURN(std::vector<KvEval> ev,
                         evaluate_kv(*m.model, eval,
                                     {KvEvalCase{ls.cfg.codec, ls.cfg.corruption, nullptr},
                                      KvEvalCase{ls.cfg.codec, ls.cfg.corruption, set}, KvEvalCase{}}));
  const KvEval &plain = ev[0], &repaired = ev[1], &clean = ev[2];
  json report = {{"job_id", job.id},
                 {"config", json::parse(kv_repair_config_json(ls.cfg))},
                 {"calibration_windows", calib.size()},
                 {"eval_windows", eval.size()},
                 {"eval_source", ls.text.test_texts.empty() ? "sampled from the model" : "test_path"},
                 {"repair_params", set->n_params()},
                 {"layers", repair_layers_string(set->layers())},
                 {"clean", {{"ppl", clean.ppl}}},
                 {"corrupted", {{"ppl", plain.ppl}, {"mean_kl", plain.mean_kl}}},
                 {"repaired", {{"ppl", repaired.ppl}, {"mean_kl", repaired.mean_kl}}},
                 {"kl_reduction", plain.mean_kl > 0 ? 1.0 - repaired.mean_kl / plain.mean_kl : 0.0}};

  return publish_checked_artifact(*opts_.store, "kv_repair", job, m.name, report, serving::kKvRepairFile,
                                  serving::kKvRepairFormat, ls.text.activate, [&](const std::string& path) {
                                    return set->save(path, {{"codec", kv_codec_name(ls.cfg.codec)},
                                                            {"corruption", ls.cfg.corruption.to_string()},
                                                            {"model", m.name}});
                                  });
}

}  // namespace frost::jobs
