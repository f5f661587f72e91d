#include "core/jobs/text_job_spec.h"

#include <chrono>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/status_macros.h"
#include "core/jobs/state_dir.h"
#include "core/serving/checked_file.h"
#include "core/train/repair_train.h"

namespace frost::jobs {

using nlohmann::json;

absl::StatusOr<TextJobSpec> parse_text_job_spec(const std::optional<std::string>& calib_path,
                                                const std::optional<std::string>& test_path,
                                                std::optional<int64_t> calib_windows,
                                                std::optional<int64_t> eval_windows,
                                                std::optional<int64_t> fisher_windows,
                                                const ConfigEntries& config, bool activate,
                                                const std::string& data_root) {
  TextJobSpec s;
  s.config = config;
  for (const auto& [given, key] : {std::pair{&calib_path, "calib_path"}, std::pair{&test_path, "test_path"}}) {
    if (!given->has_value()) continue;
    FROST_ASSIGN_OR_RETURN(std::string path, resolve_data_path(data_root, **given, key));
    FROST_ASSIGN_OR_RETURN(std::vector<std::string> texts, load_text_jsonl(path));
    const bool calib = std::string(key) == "calib_path";
    (calib ? s.calib_texts : s.test_texts) = std::move(texts);
    (calib ? s.calib_path : s.test_path) = path;
  }
  for (const auto& [given, count, name] :
       {std::tuple{&calib_windows, &s.counts.calib_windows, "calib_windows"},
        std::tuple{&eval_windows, &s.counts.eval_windows, "eval_windows"},
        std::tuple{&fisher_windows, &s.counts.fisher_windows, "fisher_windows"}}) {
    *count = given->value_or(*count);
    if (*count < 1 || *count > 100000)
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": expected an integer in [1, 100000], got ", *count));
  }
  s.activate = activate;
  return s;
}

absl::Status check_text_job_windows(const TextJobSpec& s, const Tokenizer& tok, int64_t window,
                                    int64_t self_sample_windows) {
  if (s.calib_texts.empty() && self_sample_windows == 0)
    return absl::InvalidArgumentError(
        "calib_path: no calibration text (give calib_path or config.self_sample_windows > 0)");
  for (const auto& [texts, key] :
       {std::pair{&s.calib_texts, "calib_path"}, std::pair{&s.test_texts, "test_path"}}) {
    if (texts->empty()) continue;
    FROST_ASSIGN_OR_RETURN(auto w, make_text_windows(tok, *texts, window, 1));
    if (w.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": the text is shorter than one window of ", window, " tokens"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobWindows> make_job_windows(const TextJobSpec& s, const LoadedModel& m, int64_t window,
                                            int64_t calib, int64_t eval, int64_t self_sample_windows,
                                            uint64_t seed) {
  JobWindows w;
  const int32_t bos = m.tokenizer->bos_id();
  if (!s.calib_texts.empty()) {
    FROST_ASSIGN_OR_RETURN(w.calib, make_text_windows(*m.tokenizer, s.calib_texts, window, calib));
  }
  if (self_sample_windows > 0) {
    FROST_ASSIGN_OR_RETURN(auto smp, sample_windows(*m.model, bos, self_sample_windows, window, seed + 3));
    w.calib.insert(w.calib.end(), smp.begin(), smp.end());
  }
  if (!s.test_texts.empty()) {
    FROST_ASSIGN_OR_RETURN(w.eval, make_text_windows(*m.tokenizer, s.test_texts, window, eval));
  } else {
    FROST_ASSIGN_OR_RETURN(w.eval, sample_windows(*m.model, bos, eval, window, seed + 2));
  }
  return w;
}

KvRepairTrainOptions kv_train_options(const JobContext& ctx, const std::string& stage) {
  KvRepairTrainOptions to;
  to.cancel = ctx.cancel;
  to.checkpoint_path = ctx.checkpoint_path;
  to.checkpoint_every = ctx.checkpoint_every;
  if (!ctx.progress) return to;
  const auto t0 = std::chrono::steady_clock::now();
  to.progress = [report = ctx.progress, stage, t0](const KvRepairProgress& p) {
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    JobProgress jp;
    jp.stage = stage;
    jp.step = p.step;
    jp.steps_total = p.steps;
    jp.loss = p.loss;
    jp.kl = p.kl;
    jp.examples_per_s = p.windows_per_s;
    jp.eta_s = p.step > 0 ? el / static_cast<double>(p.step) * static_cast<double>(p.steps - p.step) : 0;
    report(jp);
  };
  return to;
}

absl::StatusOr<JobResult> publish_checked_artifact(
    serving::ArtifactStore& store, const std::string& kind, const JobRecord& job, const std::string& backbone,
    const nlohmann::json& report, const std::string& file, const std::string& format, bool activate,
    const std::function<absl::Status(const std::string& path)>& save) {
  serving::ArtifactMeta meta;
  meta.job_id = job.id;
  meta.backbone = backbone;
  meta.report_json = report.dump();
  FROST_ASSIGN_OR_RETURN(serving::ArtifactInfo info, store.publish(kind, meta, [&](const std::string& dir) {
    return serving::write_checked_file(dir, file, format, save);
  }));
  JobResult r;
  r.artifact = info.name;
  r.report_json = meta.report_json;
  r.activate = activate;
  return r;
}

}  // namespace frost::jobs
