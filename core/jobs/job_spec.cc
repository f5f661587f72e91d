#include "core/jobs/job_spec.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace frost::jobs {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json config_json(const ConfigEntries& c) {
  json o = json::object();
  for (const auto& [k, v] : c) o[k] = v;
  return o;
}

// Field readers: INVALID_ARGUMENT naming the field when the value has the wrong type.
absl::Status check_fields(const json& j, const std::set<std::string>& known) {
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) return absl::InvalidArgumentError(absl::StrCat("spec: unknown field \"", k, "\""));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> opt_string(const json& j, const char* key) {
  if (!j.contains(key)) return std::optional<std::string>();
  if (!j[key].is_string()) return absl::InvalidArgumentError(absl::StrCat(key, ": expected a string"));
  return std::optional<std::string>(j[key].get<std::string>());
}

absl::StatusOr<std::optional<double>> opt_number(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::optional<double>();
  if (!j[key].is_number()) return absl::InvalidArgumentError(absl::StrCat(key, ": expected a number"));
  return std::optional<double>(j[key].get<double>());
}

absl::StatusOr<std::optional<int64_t>> opt_count(const json& j, const char* key) {
  if (!j.contains(key)) return std::optional<int64_t>();
  if (!j[key].is_number_integer()) return absl::InvalidArgumentError(absl::StrCat(key, ": expected an integer"));
  return std::optional<int64_t>(j[key].get<int64_t>());
}

absl::StatusOr<bool> read_activate(const json& j) {
  if (!j.contains("activate")) return false;
  if (!j["activate"].is_boolean()) return absl::InvalidArgumentError("activate: expected true or false");
  return j["activate"].get<bool>();
}

absl::StatusOr<ConfigEntries> read_config(const json& j) {
  ConfigEntries c;
  if (!j.contains("config")) return c;
  if (!j["config"].is_object()) return absl::InvalidArgumentError("config: expected an object of key: value");
  for (const auto& [k, v] : j["config"].items()) {
    if (!v.is_string()) return absl::InvalidArgumentError(absl::StrCat("config.", k, ": expected a string value"));
    c.emplace_back(k, v.get<std::string>());
  }
  return c;
}

json to_json(const PrototypeJobSpec& s) {
  json j = json::object();
  if (s.train_path) j["train_path"] = *s.train_path;
  if (s.inline_rows) {
    json rows = json::array();
    for (const TrainingRow& r : *s.inline_rows) {
      json row = {{"text", r.text}, {"label", r.label}};
      if (!r.id.empty()) row["id"] = r.id;
      rows.push_back(std::move(row));
    }
    j["inline_rows"] = std::move(rows);
  }
  if (s.test_path) j["test_path"] = *s.test_path;
  if (s.holdout_fraction) j["holdout_fraction"] = *s.holdout_fraction;
  if (s.label_min) j["label_min"] = *s.label_min;
  if (s.label_max) j["label_max"] = *s.label_max;
  j["config"] = config_json(s.config);
  j["activate"] = s.activate;
  return j;
}

absl::StatusOr<PrototypeJobSpec> prototype_from_json(const json& j) {
  FROST_RETURN_IF_ERROR(check_fields(j, {"train_path", "inline_rows", "test_path", "holdout_fraction", "label_min",
                                         "label_max", "config", "activate"}));
  PrototypeJobSpec s;
  FROST_ASSIGN_OR_RETURN(s.train_path, opt_string(j, "train_path"));
  if (j.contains("inline_rows")) {
    if (!j["inline_rows"].is_array()) return absl::InvalidArgumentError("inline_rows: expected an array");
    std::vector<TrainingRow> rows;
    for (size_t i = 0; i < j["inline_rows"].size(); ++i) {
      const json& r = j["inline_rows"][i];
      const std::string where = absl::StrCat("inline_rows:", i + 1);
      if (!r.is_object() || !r.contains("text") || !r["text"].is_string() || !r.contains("label") ||
          !r["label"].is_number() || (r.contains("id") && !r["id"].is_string()))
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": expected {\"text\": string, \"label\": number[, \"id\": string]}"));
      rows.push_back({r["text"].get<std::string>(), r["label"].get<double>(), r.value("id", "")});
    }
    s.inline_rows = std::move(rows);
  }
  FROST_ASSIGN_OR_RETURN(s.test_path, opt_string(j, "test_path"));
  FROST_ASSIGN_OR_RETURN(s.holdout_fraction, opt_number(j, "holdout_fraction"));
  FROST_ASSIGN_OR_RETURN(s.label_min, opt_number(j, "label_min"));
  FROST_ASSIGN_OR_RETURN(s.label_max, opt_number(j, "label_max"));
  FROST_ASSIGN_OR_RETURN(s.config, read_config(j));
  FROST_ASSIGN_OR_RETURN(s.activate, read_activate(j));
  return s;
}

template <class S>
json kv_to_json(const S& s) {
  json j = json::object();
  if (s.calib_path) j["calib_path"] = *s.calib_path;
  if (s.test_path) j["test_path"] = *s.test_path;
  if (s.calib_windows) j["calib_windows"] = *s.calib_windows;
  if (s.eval_windows) j["eval_windows"] = *s.eval_windows;
  if constexpr (std::is_same_v<S, KvSpliceJobSpec>) {
    if (s.fisher_windows) j["fisher_windows"] = *s.fisher_windows;
  }
  j["config"] = config_json(s.config);
  j["activate"] = s.activate;
  return j;
}

template <class S>
absl::StatusOr<S> kv_from_json(const json& j) {
  std::set<std::string> known = {"calib_path", "test_path", "calib_windows", "eval_windows", "config", "activate"};
  if constexpr (std::is_same_v<S, KvSpliceJobSpec>) known.insert("fisher_windows");
  FROST_RETURN_IF_ERROR(check_fields(j, known));
  S s;
  FROST_ASSIGN_OR_RETURN(s.calib_path, opt_string(j, "calib_path"));
  FROST_ASSIGN_OR_RETURN(s.test_path, opt_string(j, "test_path"));
  FROST_ASSIGN_OR_RETURN(s.calib_windows, opt_count(j, "calib_windows"));
  FROST_ASSIGN_OR_RETURN(s.eval_windows, opt_count(j, "eval_windows"));
  if constexpr (std::is_same_v<S, KvSpliceJobSpec>) {
    FROST_ASSIGN_OR_RETURN(s.fisher_windows, opt_count(j, "fisher_windows"));
  }
  FROST_ASSIGN_OR_RETURN(s.config, read_config(j));
  FROST_ASSIGN_OR_RETURN(s.activate, read_activate(j));
  return s;
}

}  // namespace

bool PrototypeJobSpec::operator==(const PrototypeJobSpec& o) const {
  return train_path == o.train_path && inline_rows == o.inline_rows && test_path == o.test_path &&
         holdout_fraction == o.holdout_fraction && label_min == o.label_min && label_max == o.label_max &&
         config == o.config && activate == o.activate;
}

bool KvRepairJobSpec::operator==(const KvRepairJobSpec& o) const {
  return calib_path == o.calib_path && test_path == o.test_path && calib_windows == o.calib_windows &&
         eval_windows == o.eval_windows && config == o.config && activate == o.activate;
}

bool KvSpliceJobSpec::operator==(const KvSpliceJobSpec& o) const {
  return calib_path == o.calib_path && test_path == o.test_path && calib_windows == o.calib_windows &&
         eval_windows == o.eval_windows && fisher_windows == o.fisher_windows && config == o.config &&
         activate == o.activate;
}

bool JobProgress::operator==(const JobProgress& o) const {
  return stage == o.stage && epoch == o.epoch && epochs == o.epochs && step == o.step &&
         steps_total == o.steps_total && loss == o.loss && kl == o.kl && examples_per_s == o.examples_per_s &&
         eta_s == o.eta_s;
}

const char* job_kind_name(const JobSpec& spec) {
  switch (spec.index()) {
    case 0:
      return "prototype";
    case 1:
      return "kv_repair";
    default:
      return "kvsplice";
  }
}

std::string spec_to_json(const JobSpec& spec) {
  return std::visit(
      [](const auto& s) -> std::string {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, PrototypeJobSpec>) {
          return dump(to_json(s));
        } else {
          return dump(kv_to_json(s));
        }
      },
      spec);
}

absl::StatusOr<JobSpec> spec_from_json(const std::string& kind, const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("spec: not a JSON object");
  if (kind == "prototype") {
    FROST_ASSIGN_OR_RETURN(PrototypeJobSpec s, prototype_from_json(j));
    return JobSpec(std::move(s));
  }
  if (kind == "kv_repair") {
    FROST_ASSIGN_OR_RETURN(KvRepairJobSpec s, kv_from_json<KvRepairJobSpec>(j));
    return JobSpec(std::move(s));
  }
  if (kind == "kvsplice") {
    FROST_ASSIGN_OR_RETURN(KvSpliceJobSpec s, kv_from_json<KvSpliceJobSpec>(j));
    return JobSpec(std::move(s));
  }
  return absl::InvalidArgumentError(absl::StrCat("kind: unknown job kind \"", kind, "\""));
}

std::string training_rows_jsonl(const std::vector<TrainingRow>& rows) {
  std::string out;
  for (const TrainingRow& r : rows) {
    json row = {{"text", r.text}, {"label", r.label}};
    if (!r.id.empty()) row["id"] = r.id;
    out += dump(row);
    out += '\n';
  }
  return out;
}

absl::StatusOr<ConfigEntries> config_entries_from_json(const std::string& json_object) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(json_object, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InternalError("config dump: not a JSON object");
  ConfigEntries c;
  for (const auto& [k, v] : j.items()) c.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
  return c;
}

std::string progress_to_json(const JobProgress& p) {
  json j = {{"stage", p.stage},       {"epoch", p.epoch}, {"epochs", p.epochs},
            {"step", p.step},         {"steps_total", p.steps_total},
            {"loss", p.loss},         {"kl", p.kl},
            {"examples_per_s", p.examples_per_s}, {"eta_s", p.eta_s}};
  return dump(j);
}

std::optional<JobProgress> progress_from_json(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  JobProgress p;
  auto num = [&](const char* k, double def) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : def; };
  // A count outside its type's range reads as missing: converting such a double is undefined behaviour
  // (found by tests/fuzz/job_spec_fuzz.cc with "steps_total": 1.8e22).
  auto count = [&](const char* k, auto def) -> decltype(def) {
    using T = decltype(def);
    const double v = num(k, static_cast<double>(def));
    const double lo = static_cast<double>(std::numeric_limits<T>::min());  // -2^31 / -2^63, exact
    return v >= lo && v < -lo ? static_cast<T>(v) : def;
  };
  if (j.contains("stage") && j["stage"].is_string()) p.stage = j["stage"].get<std::string>();
  p.epoch = count("epoch", int32_t{0});
  p.epochs = count("epochs", int32_t{0});
  p.step = count("step", int64_t{0});
  p.steps_total = count("steps_total", int64_t{0});
  p.loss = num("loss", 0);
  p.kl = num("kl", 0);
  p.examples_per_s = num("examples_per_s", 0);
  p.eta_s = num("eta_s", 0);
  return p;
}

}  // namespace frost::jobs
