#include "core/jobs/text_job_spec.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/sha256.h"
#include "core/common/status_macros.h"
#include "core/jobs/state_dir.h"
#include "core/train/repair_train.h"

namespace frost::jobs {

using nlohmann::json;

int64_t TextJobSpec::count(const std::string& name) const {
  for (const auto& [k, v] : counts)
    if (k == name) return v;
  return 0;
}

absl::StatusOr<TextJobSpec> parse_text_job_spec(const json& spec, const std::string& data_root,
                                                const std::vector<std::pair<std::string, int64_t>>& counts) {
  if (!spec.is_object()) return absl::InvalidArgumentError("spec: not a JSON object");
  auto is_count = [&](const std::string& k) {
    for (const auto& c : counts)
      if (c.first == k) return true;
    return false;
  };
  for (const auto& [k, v] : spec.items()) {
    if (k != "calib_path" && k != "test_path" && k != "config" && k != "activate" && !is_count(k))
      return absl::InvalidArgumentError(absl::StrCat("spec: unknown field \"", k, "\""));
  }
  TextJobSpec s;
  if (spec.contains("config")) {
    if (!spec["config"].is_object())
      return absl::InvalidArgumentError("config: expected an object of key: value");
    for (const auto& [k, v] : spec["config"].items()) {
      if (!v.is_string())
        return absl::InvalidArgumentError(absl::StrCat("config.", k, ": expected a string value"));
      s.config.emplace_back(k, v.get<std::string>());
    }
  }
  for (const char* key : {"calib_path", "test_path"}) {
    if (!spec.contains(key)) continue;
    if (!spec[key].is_string()) return absl::InvalidArgumentError(absl::StrCat(key, ": expected a string"));
    FROST_ASSIGN_OR_RETURN(std::string path, resolve_data_path(data_root, spec[key].get<std::string>(), key));
    FROST_ASSIGN_OR_RETURN(std::vector<std::string> texts, load_text_jsonl(path));
    const bool calib = std::string(key) == "calib_path";
    (calib ? s.calib_texts : s.test_texts) = std::move(texts);
    (calib ? s.calib_path : s.test_path) = path;
  }
  for (const auto& [key, def] : counts) {
    int64_t v = def;
    if (spec.contains(key)) {
      if (!spec[key].is_number_integer() || spec[key].get<int64_t>() < 1 || spec[key].get<int64_t>() > 100000)
        return absl::InvalidArgumentError(absl::StrCat(key, ": expected an integer in [1, 100000]"));
      v = spec[key].get<int64_t>();
    }
    s.counts.emplace_back(key, v);
  }
  if (spec.contains("activate")) {
    if (!spec["activate"].is_boolean()) return absl::InvalidArgumentError("activate: expected true or false");
    s.activate = spec["activate"].get<bool>();
  }
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

json normalised_text_job_spec(const TextJobSpec& s, const std::string& config_json) {
  json out = json::object();
  if (!s.calib_path.empty()) out["calib_path"] = s.calib_path;
  if (!s.test_path.empty()) out["test_path"] = s.test_path;
  for (const auto& [k, v] : s.counts) out[k] = v;
  out["activate"] = s.activate;
  json cfg = json::parse(config_json);
  json cfg_strings = json::object();  // the normalised config, as strings (the spec's own format)
  for (const auto& [k, v] : cfg.items()) cfg_strings[k] = v.is_string() ? v.get<std::string>() : v.dump();
  out["config"] = cfg_strings;
  return out;
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

absl::Status write_checked_file(const std::string& dir, const std::string& file, const std::string& format,
                                const std::function<absl::Status(const std::string& path)>& save) {
  const std::string path = dir + "/" + file;
  FROST_RETURN_IF_ERROR(save(path));
  FROST_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  json manifest = {
      {"format", format}, {"file", file}, {"sha256", sha256_hex(bytes)}, {"bytes", bytes.size()}};
  return write_file_atomic(dir + "/manifest.json", manifest.dump(2));
}

absl::StatusOr<std::string> verify_checked_file(const std::string& dir, const std::string& file,
                                                const std::string& format) {
  FROST_ASSIGN_OR_RETURN(std::string mtext, read_file(dir + "/manifest.json", 1 << 20));
  json manifest = json::parse(mtext, nullptr, false);
  if (!manifest.is_object() || manifest.value("format", "") != format || manifest.value("file", "") != file ||
      !manifest.contains("sha256") || !manifest["sha256"].is_string())
    return absl::DataLossError(absl::StrCat(dir, "/manifest.json: not a ", format, " manifest"));
  const std::string path = dir + "/" + file;
  FROST_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  if (sha256_hex(bytes) != manifest["sha256"].get<std::string>())
    return absl::DataLossError(absl::StrCat(dir, "/", file, ": sha256 does not match the manifest"));
  return path;
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
    report(nlohmann::json{
        {"stage", stage},
        {"step", p.step},
        {"steps_total", p.steps},
        {"loss", p.loss},
        {"kl", p.kl},
        {"examples_per_s", p.windows_per_s},
        {"eta_s", p.step > 0 ? el / static_cast<double>(p.step) * static_cast<double>(p.steps - p.step) : 0}}
               .dump());
  };
  return to;
}

absl::StatusOr<JobResult> publish_checked_artifact(
    ArtifactStore& store, const std::string& kind, const JobRecord& job, const std::string& backbone,
    const nlohmann::json& report, const std::string& file, const std::string& format, bool activate,
    const std::function<absl::Status(const std::string& path)>& save) {
  ArtifactMeta meta;
  meta.job_id = job.id;
  meta.backbone = backbone;
  meta.report_json = report.dump();
  FROST_ASSIGN_OR_RETURN(ArtifactInfo info, store.publish(kind, meta, [&](const std::string& dir) {
    return write_checked_file(dir, file, format, save);
  }));
  JobResult r;
  r.artifact = info.name;
  r.report_json = meta.report_json;
  r.activate = activate;
  return r;
}

}  // namespace frost::jobs
