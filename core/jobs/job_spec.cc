#include "core/jobs/job_spec.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"
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

// The scalar fields of each kind's spec, declared once (core/common/config_fields.h): the journal's JSON is
// written with to_json and read back typed (a string only for a path, an integer only for a count; an
// unknown field, or a value of another type, is INVALID_ARGUMENT naming the field and the value:
// `train_path: expected a string, got 7`). inline_rows (a list of rows) and config (a free map, parsed by the
// kind) are read by hand below. Ranges and defaults are the kinds' (prepare() resolves and checks them), not
// the table's: a journal keeps what was asked for, and prepare() says what of it does not fit.
template <class S>
std::vector<ConfigField<S>> data_fields() {
  using T = std::string;
  if constexpr (std::is_same_v<S, PrototypeJobSpec>) {
    return {
        optional_field<S>(&S::train_path,
                          string_field<T>("train_path", self()).doc("JSONL under jobs.data_root")),
        optional_field<S>(&S::test_path, string_field<T>("test_path", self()).doc("held-out JSONL")),
        optional_field<S>(
            &S::holdout_fraction,
            number_field<double>("holdout_fraction", self()).doc("held out of train_path without test_path")),
        optional_field<S>(&S::label_min, number_field<double>("label_min", self()).doc("lowest label")),
        optional_field<S>(&S::label_max, number_field<double>("label_max", self()).doc("highest label"))};
  } else {
    std::vector<ConfigField<S>> f = {
        optional_field<S>(&S::calib_path, string_field<T>("calib_path", self()).doc("text JSONL to fit on")),
        optional_field<S>(&S::test_path,
                          string_field<T>("test_path", self()).doc("text JSONL to evaluate on")),
        optional_field<S>(&S::calib_windows,
                          int_field<int64_t>("calib_windows", self()).doc("windows to fit on")),
        optional_field<S>(&S::eval_windows,
                          int_field<int64_t>("eval_windows", self()).doc("windows to evaluate"))};
    if constexpr (std::is_same_v<S, KvSpliceJobSpec>)
      f.push_back(
          optional_field<S>(&S::fisher_windows,
                            int_field<int64_t>("fisher_windows", self()).doc("windows for the Fisher pass")));
    return f;
  }
}

template <class S>
const ConfigTable<S>& spec_table() {
  static const ConfigTable<S> t(
      "",
      fields_of<S>({data_fields<S>(),
                    {bool_field<S>("activate", &S::activate).doc("activate the artifact on success")}}),
      FieldStyle::kPath);
  return t;
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

json inline_rows_json(const std::vector<TrainingRow>& rows) {
  json out = json::array();
  for (const TrainingRow& r : rows) {
    json row = {{"text", r.text}, {"label", r.label}};
    if (!r.id.empty()) row["id"] = r.id;
    out.push_back(std::move(row));
  }
  return out;
}

absl::StatusOr<std::vector<TrainingRow>> read_inline_rows(const json& j) {
  if (!j.is_array()) return absl::InvalidArgumentError("inline_rows: expected an array");
  std::vector<TrainingRow> rows;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& r = j[i];
    const std::string where = absl::StrCat("inline_rows:", i + 1);
    if (!r.is_object() || !r.contains("text") || !r["text"].is_string() || !r.contains("label") ||
        !r["label"].is_number() || (r.contains("id") && !r["id"].is_string()))
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected {\"text\": string, \"label\": number[, \"id\": string]}"));
    rows.push_back({r["text"].get<std::string>(), r["label"].get<double>(), r.value("id", "")});
  }
  return rows;
}

// The journal's JSON of a spec: the table's fields (keys sorted, as nlohmann::json writes them, so the bytes
// are what earlier versions wrote), then the two read by hand.
template <class S>
json to_json(const S& s) {
  json j = spec_table<S>().template to_json<json>(s);
  if constexpr (std::is_same_v<S, PrototypeJobSpec>) {
    if (s.inline_rows) j["inline_rows"] = inline_rows_json(*s.inline_rows);
  }
  j["config"] = config_json(s.config);
  return j;
}

template <class S>
absl::StatusOr<S> from_json(const json& j) {
  S s;
  JsonRead how;
  how.typed = true;
  how.by_hand = {"config"};
  if constexpr (std::is_same_v<S, PrototypeJobSpec>) how.by_hand.push_back("inline_rows");
  FROST_RETURN_IF_ERROR(spec_table<S>().set_json(s, j, how));
  if constexpr (std::is_same_v<S, PrototypeJobSpec>) {
    if (j.contains("inline_rows")) {
      FROST_ASSIGN_OR_RETURN(s.inline_rows, read_inline_rows(j["inline_rows"]));
    }
  }
  FROST_ASSIGN_OR_RETURN(s.config, read_config(j));
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

const ConfigTable<PrototypeJobSpec>& prototype_spec_table() { return spec_table<PrototypeJobSpec>(); }
const ConfigTable<KvRepairJobSpec>& kv_repair_spec_table() { return spec_table<KvRepairJobSpec>(); }
const ConfigTable<KvSpliceJobSpec>& kvsplice_spec_table() { return spec_table<KvSpliceJobSpec>(); }

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
  return std::visit([](const auto& s) { return dump(to_json(s)); }, spec);
}

absl::StatusOr<JobSpec> spec_from_json(const std::string& kind, const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("spec: not a JSON object");
  if (kind == "prototype") {
    FROST_ASSIGN_OR_RETURN(PrototypeJobSpec s, from_json<PrototypeJobSpec>(j));
    return JobSpec(std::move(s));
  }
  if (kind == "kv_repair") {
    FROST_ASSIGN_OR_RETURN(KvRepairJobSpec s, from_json<KvRepairJobSpec>(j));
    return JobSpec(std::move(s));
  }
  if (kind == "kvsplice") {
    FROST_ASSIGN_OR_RETURN(KvSpliceJobSpec s, from_json<KvSpliceJobSpec>(j));
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
