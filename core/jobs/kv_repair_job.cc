#include "core/jobs/kv_repair_job.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/sha256.h"
#include "core/common/status_macros.h"
#include "core/jobs/state_dir.h"
#include "core/kv/repair_train.h"

namespace frost::jobs {

namespace {

using nlohmann::json;

constexpr const char* kManifestFormat = "frost.kv_repair.v1";
constexpr const char* kFile = "repair.safetensors";

struct LoadedSpec {
  KvRepairConfig cfg;
  std::vector<std::string> calib_texts, test_texts;
  int64_t calib_windows = 64, eval_windows = 16;
  bool activate = false;
};

absl::StatusOr<int64_t> count_field(const json& spec, const char* key, int64_t def) {
  if (!spec.contains(key)) return def;
  if (!spec[key].is_number_integer() || spec[key].get<int64_t>() < 1 || spec[key].get<int64_t>() > 100000)
    return absl::InvalidArgumentError(absl::StrCat(key, ": expected an integer in [1, 100000]"));
  return spec[key].get<int64_t>();
}

// Parses and checks a spec; fills `norm` (absolute paths, every default explicit) when given.
absl::StatusOr<LoadedSpec> load_spec(const json& spec, const KvRepairJobOptions& o, json* norm) {
  if (!spec.is_object()) return absl::InvalidArgumentError("spec: not a JSON object");
  for (const auto& [k, v] : spec.items()) {
    if (k != "calib_path" && k != "test_path" && k != "calib_windows" && k != "eval_windows" &&
        k != "config" && k != "activate")
      return absl::InvalidArgumentError(absl::StrCat("spec: unknown field \"", k, "\""));
  }
  LoadedSpec ls;
  json out = json::object();
  if (spec.contains("config")) {
    if (!spec["config"].is_object())
      return absl::InvalidArgumentError("config: expected an object of key: value");
    for (const auto& [k, v] : spec["config"].items()) {
      if (!v.is_string())
        return absl::InvalidArgumentError(absl::StrCat("config.", k, ": expected a string value"));
      FROST_RETURN_IF_ERROR(set_kv_repair_field(ls.cfg, k, v.get<std::string>()));
    }
  }
  FROST_RETURN_IF_ERROR(validate_kv_repair_config(ls.cfg, o.model->config));
  for (const char* key : {"calib_path", "test_path"}) {
    if (!spec.contains(key)) continue;
    if (!spec[key].is_string()) return absl::InvalidArgumentError(absl::StrCat(key, ": expected a string"));
    FROST_ASSIGN_OR_RETURN(std::string path,
                           resolve_data_path(o.data_root, spec[key].get<std::string>(), key));
    FROST_ASSIGN_OR_RETURN(std::vector<std::string> texts, load_text_jsonl(path));
    (std::string(key) == "calib_path" ? ls.calib_texts : ls.test_texts) = std::move(texts);
    out[key] = path;
  }
  FROST_ASSIGN_OR_RETURN(ls.calib_windows, count_field(spec, "calib_windows", 64));
  FROST_ASSIGN_OR_RETURN(ls.eval_windows, count_field(spec, "eval_windows", 16));
  if (spec.contains("activate")) {
    if (!spec["activate"].is_boolean()) return absl::InvalidArgumentError("activate: expected true or false");
    ls.activate = spec["activate"].get<bool>();
  }
  if (ls.calib_texts.empty() && ls.cfg.self_sample_windows == 0)
    return absl::InvalidArgumentError(
        "calib_path: no calibration text (give calib_path or config.self_sample_windows > 0)");
  const Tokenizer& tok = *o.model->tokenizer;
  if (!ls.calib_texts.empty()) {
    FROST_ASSIGN_OR_RETURN(auto w, make_text_windows(tok, ls.calib_texts, ls.cfg.window, 1));
    if (w.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("calib_path: the text is shorter than one window of ", ls.cfg.window, " tokens"));
  }
  if (!ls.test_texts.empty()) {
    FROST_ASSIGN_OR_RETURN(auto w, make_text_windows(tok, ls.test_texts, ls.cfg.window, 1));
    if (w.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("test_path: the text is shorter than one window of ", ls.cfg.window, " tokens"));
  }
  if (norm) {
    out["calib_windows"] = ls.calib_windows;
    out["eval_windows"] = ls.eval_windows;
    out["activate"] = ls.activate;
    json cfg = json::parse(kv_repair_config_json(ls.cfg));
    json cfg_strings = json::object();  // the normalised config, as strings (the spec's own format)
    for (const auto& [k, v] : cfg.items()) cfg_strings[k] = v.is_string() ? v.get<std::string>() : v.dump();
    out["config"] = cfg_strings;
    *norm = std::move(out);
  }
  return ls;
}

}  // namespace

absl::StatusOr<std::string> KvRepairJobKind::prepare(const std::string& spec_json) {
  json spec = json::parse(spec_json, nullptr, /*allow_exceptions=*/false);
  json norm;
  FROST_RETURN_IF_ERROR(load_spec(spec, opts_, &norm).status());
  return norm.dump();
}

absl::StatusOr<JobResult> KvRepairJobKind::run(const JobRecord& job, const JobContext& ctx) {
  json spec = json::parse(job.spec_json, nullptr, /*allow_exceptions=*/false);
  FROST_ASSIGN_OR_RETURN(LoadedSpec ls, load_spec(spec, opts_, nullptr));
  const LoadedModel& m = *opts_.model;
  const int32_t bos = m.tokenizer->bos_id();
  std::vector<TokenWindow> calib, eval;
  if (!ls.calib_texts.empty()) {
    FROST_ASSIGN_OR_RETURN(calib,
                           make_text_windows(*m.tokenizer, ls.calib_texts, ls.cfg.window, ls.calib_windows));
  }
  if (ls.cfg.self_sample_windows > 0) {
    FROST_ASSIGN_OR_RETURN(
        auto s, sample_windows(*m.model, bos, ls.cfg.self_sample_windows, ls.cfg.window, ls.cfg.seed + 3));
    calib.insert(calib.end(), s.begin(), s.end());
  }
  if (!ls.test_texts.empty()) {
    FROST_ASSIGN_OR_RETURN(eval,
                           make_text_windows(*m.tokenizer, ls.test_texts, ls.cfg.window, ls.eval_windows));
  } else {
    FROST_ASSIGN_OR_RETURN(eval,
                           sample_windows(*m.model, bos, ls.eval_windows, ls.cfg.window, ls.cfg.seed + 2));
  }

  KvRepairTrainOptions to;
  to.cancel = ctx.cancel;
  to.checkpoint_path = ctx.checkpoint_path;
  to.checkpoint_every = ctx.checkpoint_every;
  const auto t0 = std::chrono::steady_clock::now();
  to.progress = [&](const KvRepairProgress& p) {
    if (!ctx.progress) return;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    json j = {
        {"stage", "kv_repair"},
        {"step", p.step},
        {"steps_total", p.steps},
        {"loss", p.loss},
        {"kl", p.kl},
        {"examples_per_s", p.windows_per_s},
        {"eta_s", p.step > 0 ? el / static_cast<double>(p.step) * static_cast<double>(p.steps - p.step) : 0}};
    ctx.progress(j.dump());
  };
  FROST_ASSIGN_OR_RETURN(std::shared_ptr<RepairSet> set, train_kv_repair(*m.model, ls.cfg, calib, to));

  // held-out evaluation: clean fp32, the codec (+ corruption) without and with repair
  if (ctx.progress) ctx.progress(json{{"stage", "evaluate"}, {"step", 0}, {"steps_total", 3}}.dump());
  FROST_ASSIGN_OR_RETURN(std::vector<KvEval> ev,
                         evaluate_kv(*m.model, eval,
                                     {KvEvalCase{ls.cfg.codec, ls.cfg.corruption, nullptr},
                                      KvEvalCase{ls.cfg.codec, ls.cfg.corruption, set}, KvEvalCase{}}));
  const KvEval &plain = ev[0], &repaired = ev[1], &clean = ev[2];
  json report = {{"job_id", job.id},
                 {"config", json::parse(kv_repair_config_json(ls.cfg))},
                 {"calibration_windows", calib.size()},
                 {"eval_windows", eval.size()},
                 {"eval_source", ls.test_texts.empty() ? "sampled from the model" : "test_path"},
                 {"repair_params", set->n_params()},
                 {"layers", repair_layers_string(set->layers())},
                 {"clean", {{"ppl", clean.ppl}}},
                 {"corrupted", {{"ppl", plain.ppl}, {"mean_kl", plain.mean_kl}}},
                 {"repaired", {{"ppl", repaired.ppl}, {"mean_kl", repaired.mean_kl}}},
                 {"kl_reduction", plain.mean_kl > 0 ? 1.0 - repaired.mean_kl / plain.mean_kl : 0.0}};

  ArtifactMeta meta;
  meta.job_id = job.id;
  meta.backbone = m.name;
  meta.report_json = report.dump();
  FROST_ASSIGN_OR_RETURN(
      ArtifactInfo info, opts_.store->publish("kv_repair", meta, [&](const std::string& dir) -> absl::Status {
        const std::string file = dir + "/" + kFile;
        FROST_RETURN_IF_ERROR(set->save(file, {{"codec", kv_codec_name(ls.cfg.codec)},
                                               {"corruption", ls.cfg.corruption.to_string()},
                                               {"model", m.name}}));
        FROST_ASSIGN_OR_RETURN(std::string bytes, read_file(file));
        json manifest = {{"format", kManifestFormat},
                         {"file", kFile},
                         {"sha256", sha256_hex(bytes)},
                         {"bytes", bytes.size()}};
        return write_file_atomic(dir + "/manifest.json", manifest.dump(2));
      }));
  JobResult r;
  r.artifact = info.name;
  r.report_json = report.dump();
  r.activate = ls.activate;
  return r;
}

absl::StatusOr<std::shared_ptr<const RepairSlot::Active>> load_kv_repair_artifact(const std::string& dir,
                                                                                  const RepairDims& dims,
                                                                                  const std::string& name,
                                                                                  const std::string& model) {
  FROST_ASSIGN_OR_RETURN(std::string mtext, read_file(dir + "/manifest.json", 1 << 20));
  json manifest = json::parse(mtext, nullptr, false);
  if (!manifest.is_object() || manifest.value("format", "") != kManifestFormat ||
      manifest.value("file", "") != kFile || !manifest.contains("sha256") || !manifest["sha256"].is_string())
    return absl::DataLossError(absl::StrCat(dir, "/manifest.json: not a ", kManifestFormat, " manifest"));
  FROST_ASSIGN_OR_RETURN(std::string bytes, read_file(dir + "/" + kFile));
  if (sha256_hex(bytes) != manifest["sha256"].get<std::string>())
    return absl::DataLossError(absl::StrCat(dir, "/", kFile, ": sha256 does not match the manifest"));
  return load_served_repair(dir + "/" + kFile, dims, name, model);
}

}  // namespace frost::jobs
