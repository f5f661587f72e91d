#include "core/jobs/prototype_job.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/jobs/state_dir.h"
#include "core/prototype/artifact.h"
#include "core/prototype/config.h"
#include "core/prototype/data.h"
#include "core/prototype/evaluate.h"
#include "core/prototype/trainer.h"

namespace frost::jobs {

namespace {

// Inline rows as rows: the same row rules as a file's (prototype::check_regression_rows), errors naming
// "inline_rows:<row>".
absl::StatusOr<prototype::RegressionData> inline_data(const std::vector<TrainingRow>& rows,
                                                  const prototype::LabelBounds& bounds,
                                                  const PrototypeJobOptions& o) {
  if (static_cast<int64_t>(rows.size()) > o.max_inline_rows)
    return absl::InvalidArgumentError(
        absl::StrCat("inline_rows: ", rows.size(),
                     " rows is more than jobs.max_inline_rows=", o.max_inline_rows, "; use train_path"));
  int64_t text_bytes = 0;
  for (const TrainingRow& r : rows) text_bytes += static_cast<int64_t>(r.text.size());
  if (text_bytes > o.max_inline_bytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "inline_rows: ", text_bytes, " bytes of text is more than jobs.max_inline_bytes=", o.max_inline_bytes,
        "; use train_path"));
  std::vector<prototype::RegressionRow> typed;
  typed.reserve(rows.size());
  for (const TrainingRow& r : rows) typed.push_back({r.text, r.label, r.id});
  return prototype::check_regression_rows(typed, "inline_rows", bounds);
}

struct LoadedSpec {
  prototype::LabelBounds bounds;
  prototype::RegressionData train, test;
  prototype::PrototypeConfig cfg;
  bool activate = false;
  std::string name;
};

// Loads and checks everything a spec names: at submit (paths are user input) and again at run (the
// normalised absolute paths of the prepared spec; checked all the same). Fills `normalised` when given.
absl::StatusOr<LoadedSpec> load_spec(const PrototypeJobSpec& spec, const PrototypeJobOptions& o,
                                     PrototypeJobSpec* normalised) {
  LoadedSpec ls;
  PrototypeJobSpec norm;
  const bool has_path = spec.train_path.has_value(), has_inline = spec.inline_rows.has_value();
  if (has_path == has_inline)
    return absl::InvalidArgumentError("prototype: exactly one of train_path and inline_rows must be set");
  std::string train_path;
  if (has_path) {
    FROST_ASSIGN_OR_RETURN(train_path, resolve_data_path(o.data_root, *spec.train_path, "train_path"));
    norm.train_path = train_path;
  }
  // Bounds: explicit, else meta.json beside train_path.
  const std::optional<double> lo = spec.label_min, hi = spec.label_max;
  if (lo.has_value() != hi.has_value())
    return absl::InvalidArgumentError("label_min / label_max: set both or neither");
  if (lo) {
    ls.bounds = {*lo, *hi};
    FROST_RETURN_IF_ERROR(prototype::validate_bounds(ls.bounds));
  } else {
    if (!has_path)
      return absl::InvalidArgumentError(
          "label_min / label_max: required with inline_rows (no meta.json to read)");
    const std::string meta = (std::filesystem::path(train_path).parent_path() / "meta.json").string();
    absl::StatusOr<prototype::LabelBounds> b = prototype::load_meta_bounds(meta);
    if (!b.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("label_min / label_max not set and ", b.status().message()));
    ls.bounds = *b;
  }
  norm.label_min = ls.bounds.a;
  norm.label_max = ls.bounds.b;

  if (has_path) {
    FROST_ASSIGN_OR_RETURN(ls.train, prototype::load_regression_jsonl(train_path, ls.bounds));
    ls.name = std::filesystem::path(train_path).parent_path().filename().string();
  } else {
    FROST_ASSIGN_OR_RETURN(ls.train, inline_data(*spec.inline_rows, ls.bounds, o));
    norm.inline_rows = spec.inline_rows;
    ls.name = "inline";
  }

  double holdout = 0.1;
  if (spec.test_path && !spec.test_path->empty()) {
    FROST_ASSIGN_OR_RETURN(std::string test_path,
                           resolve_data_path(o.data_root, *spec.test_path, "test_path"));
    FROST_ASSIGN_OR_RETURN(ls.test, prototype::load_regression_jsonl(test_path, ls.bounds));
    norm.test_path = test_path;
    holdout = 0;
  } else {
    if (spec.holdout_fraction) holdout = *spec.holdout_fraction;
    if (!(holdout >= 0 && holdout <= 0.5))
      return absl::InvalidArgumentError(absl::StrCat("holdout_fraction: ", holdout, " is outside [0, 0.5]"));
    norm.holdout_fraction = holdout;
  }

  std::vector<std::string> fields;
  for (const auto& [k, v] : spec.config) fields.push_back(k + "=" + v);
  FROST_RETURN_IF_ERROR(prototype::set_fields(ls.cfg, fields));
  norm.config = spec.config;
  ls.activate = spec.activate;
  norm.activate = ls.activate;

  if (holdout > 0) {
    const int64_t n = ls.train.size();
    const int64_t n_test = static_cast<int64_t>(std::llround(holdout * static_cast<double>(n)));
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
    std::mt19937_64 rng(static_cast<uint64_t>(ls.cfg.seed));
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<bool> held(static_cast<size_t>(n), false);
    for (int64_t i = 0; i < n_test; ++i) held[static_cast<size_t>(perm[static_cast<size_t>(i)])] = true;
    prototype::RegressionData tr, te;
    for (int64_t i = 0; i < n; ++i) {
      prototype::RegressionData& d = held[static_cast<size_t>(i)] ? te : tr;
      d.texts.push_back(ls.train.texts[static_cast<size_t>(i)]);
      d.labels.push_back(ls.train.labels[static_cast<size_t>(i)]);
      d.ids.push_back(ls.train.ids[static_cast<size_t>(i)]);
    }
    ls.train = std::move(tr);
    ls.test = std::move(te);
  }
  if (ls.train.size() < ls.cfg.K)
    return absl::InvalidArgumentError(absl::StrCat("config.K: ", ls.cfg.K, " prototypes need at least ",
                                                   ls.cfg.K, " training rows, the job has ",
                                                   ls.train.size()));
  if (normalised) *normalised = std::move(norm);
  return ls;
}

}  // namespace

absl::StatusOr<JobSpec> PrototypeJobKind::prepare(const JobSpec& spec) {
  const auto* s = std::get_if<PrototypeJobSpec>(&spec);
  if (!s) return absl::InvalidArgumentError("prototype: not a prototype job spec");
  PrototypeJobSpec norm;
  FROST_RETURN_IF_ERROR(load_spec(*s, opts_, &norm).status());
  return JobSpec(std::move(norm));
}

absl::StatusOr<JobResult> PrototypeJobKind::run(const JobRecord& job, const JobContext& ctx) {
  const auto* spec = std::get_if<PrototypeJobSpec>(&job.spec);
  if (!spec) return absl::InternalError("prototype: the job's spec is not a prototype job spec");
  FROST_ASSIGN_OR_RETURN(LoadedSpec ls, load_spec(*spec, opts_, nullptr));

  prototype::TrainHooks hooks;
  hooks.cancel = ctx.cancel;
  hooks.checkpoint_path = ctx.checkpoint_path;
  hooks.checkpoint_every = ctx.checkpoint_every;
  hooks.on_progress = [&](const prototype::TrainProgress& p) {
    if (!ctx.progress) return;
    JobProgress jp;
    jp.stage = p.stage;
    jp.epoch = static_cast<int32_t>(p.epoch);
    jp.epochs = static_cast<int32_t>(p.epochs);
    jp.step = p.global_step;
    jp.steps_total = p.total_steps;
    jp.loss = p.loss;
    jp.examples_per_s = p.examples_per_s;
    jp.eta_s = p.eta_s;
    ctx.progress(jp);
  };

  std::string report;
  serving::ArtifactMeta meta;
  meta.job_id = job.id;
  meta.backbone = opts_.model->name;
  FROST_ASSIGN_OR_RETURN(
      serving::ArtifactInfo info,
      opts_.store->publish("prototype", meta, [&](const std::string& dir) -> absl::Status {
        if (ls.test.size() > 0) {
          prototype::DatasetDir d{ls.name, ls.bounds, ls.train, ls.test};
          prototype::EvalOptions eo;
          eo.cfg = ls.cfg;
          eo.artifact_dir = dir;
          eo.hooks = hooks;
          FROST_ASSIGN_OR_RETURN(nlohmann::ordered_json r, prototype::evaluate_prototype(*opts_.model, d, eo));
          r["job_id"] = job.id;
          if (r.contains("artifact"))
            r["artifact"].erase("dir");  // the temporary directory it was written to
          // A head that trails the linear probe beyond probe_margin still succeeds: the report's
          // "warnings" (from evaluate_prototype) says so, and so does the log.
          if (r.contains("warnings"))
            FROST_LOG_WARN("prototype job %s: %s", job.id.c_str(),
                           r["warnings"][0].get<std::string>().c_str());
          report = r.dump();
        } else {
          FROST_ASSIGN_OR_RETURN(auto trainer,
                                 prototype::PrototypeTrainer::create(*opts_.model, ls.train, ls.bounds, ls.cfg));
          FROST_ASSIGN_OR_RETURN(prototype::PrototypeArtifact art, trainer->run(hooks));
          FROST_RETURN_IF_ERROR(prototype::save_artifact(art, dir).status());
          report = nlohmann::json{{"job_id", job.id},
                                  {"n_train", ls.train.size()},
                                  {"compute_device", trainer->device().name},
                                  {"evaluation", "none (holdout 0)"}}
                       .dump();
        }
        meta.report_json = report;  // publish() reads meta after write() returns
        return absl::OkStatus();
      }));
  JobResult r;
  r.artifact = info.name;
  r.report_json = report;
  r.activate = ls.activate;
  return r;
}

}  // namespace frost::jobs
