#pragma once
// JobSpec and JobProgress: what a training job asks for and how far it got, as types. They cross every
// internal boundary (Training RPC → Scheduler → JobKind → journal → WatchJob); JSON appears only where they
// become bytes: the journal stores them with spec_to_json / progress_to_json (one to/from pair per kind,
// held to round trips and to the journals earlier frostd versions wrote by tests/unit/jobs/job_spec_test.cc),
// and the proto edge shows the spec as that same JSON (frost.v1.Job.spec_json).
//
// A field left unset (std::nullopt) takes the kind's default at prepare(); the normalised spec a kind
// returns has every path resolved and its defaults explicit.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace frost {
template <typename C>
class ConfigTable;  // core/common/config_fields.h
}  // namespace frost

namespace frost::jobs {

// Overrides of a kind's config ("K" → "16"), in the order given; values are parsed by the kind.
using ConfigEntries = std::vector<std::pair<std::string, std::string>>;

struct TrainingRow {
  std::string text;
  double label = 0;
  std::string id;  // "" = none
  bool operator==(const TrainingRow& o) const { return text == o.text && label == o.label && id == o.id; }
};

// `prototype` (core/jobs/prototype_job.h): exactly one of train_path and inline_rows.
struct PrototypeJobSpec {
  std::optional<std::string> train_path;               // JSONL under jobs.data_root
  std::optional<std::vector<TrainingRow>> inline_rows;  // rows sent in the request
  std::optional<std::string> test_path;                 // held-out JSONL
  std::optional<double> holdout_fraction;               // without test_path; default 0.1
  std::optional<double> label_min, label_max;           // default: meta.json beside train_path
  ConfigEntries config;                                 // PrototypeConfig overrides
  bool activate = false;                                // activate the artifact on success
  bool operator==(const PrototypeJobSpec& o) const;
};

// `kv_repair` (core/jobs/kv_repair_job.h).
struct KvRepairJobSpec {
  std::optional<std::string> calib_path, test_path;         // text JSONL under jobs.data_root
  std::optional<int64_t> calib_windows, eval_windows;       // [1, 100000]; defaults 64 and 16
  ConfigEntries config;                                     // KvRepairConfig fields
  bool activate = false;
  bool operator==(const KvRepairJobSpec& o) const;
};

// `kvsplice` (core/jobs/kvsplice_job.h).
struct KvSpliceJobSpec {
  std::optional<std::string> calib_path, test_path;
  std::optional<int64_t> calib_windows, eval_windows, fisher_windows;  // [1, 100000]
  ConfigEntries config;                                                // KvSpliceConfig fields
  bool activate = false;
  bool operator==(const KvSpliceJobSpec& o) const;
};

using JobSpec = std::variant<PrototypeJobSpec, KvRepairJobSpec, KvSpliceJobSpec>;

// Each kind's scalar fields, declared once (core/common/config_fields.h): the journal's JSON is read through
// them, and so is the Training RPC's proto (server/training_service.cc, each row by its proto field's name).
// inline_rows and config are read by hand by both.
const ConfigTable<PrototypeJobSpec>& prototype_spec_table();
const ConfigTable<KvRepairJobSpec>& kv_repair_spec_table();
const ConfigTable<KvSpliceJobSpec>& kvsplice_spec_table();

// "prototype" | "kv_repair" | "kvsplice": the kind a spec is for.
const char* job_kind_name(const JobSpec& spec);

// The journal's bytes (and frost.v1.Job.spec_json): one JSON object, only the fields that are set.
std::string spec_to_json(const JobSpec& spec);
// Parses what spec_to_json wrote — and what earlier frostd versions wrote, which is the same format — for
// `kind`. INVALID_ARGUMENT naming the field for an unknown field or a value of the wrong type, and for an
// unknown kind.
absl::StatusOr<JobSpec> spec_from_json(const std::string& kind, const std::string& json);

// Inline rows as JSONL lines {"text", "label"[, "id"]}, the form a file of them has (the prototype kind
// itself checks inline rows as rows: prototype::check_regression_rows).
std::string training_rows_jsonl(const std::vector<TrainingRow>& rows);
// A JSON object of config values (numbers, strings, booleans: a trainer's config dump) as entries, every
// value as its JSON text except strings (their content): the normalised config of a kind.
absl::StatusOr<ConfigEntries> config_entries_from_json(const std::string& json_object);

// A running job's progress. Prototype jobs report epochs; KV jobs report the KL of their last step.
struct JobProgress {
  std::string stage;  // the kind's stage names, in pipeline order (e.g. features, stage_a, stage_b)
  int32_t epoch = 0, epochs = 0;
  int64_t step = 0, steps_total = 0;
  double loss = 0, kl = 0, examples_per_s = 0, eta_s = 0;
  bool operator==(const JobProgress& o) const;
};

std::string progress_to_json(const JobProgress& p);
// Lenient: fields it does not know or that are missing are ignored (journals of earlier versions); nullopt
// for text that is not a JSON object.
std::optional<JobProgress> progress_from_json(const std::string& json);

}  // namespace frost::jobs
