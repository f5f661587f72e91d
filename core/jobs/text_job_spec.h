#pragma once
// The spec fields the KV job kinds (kv_repair, kvsplice) share: calibration / held-out text files under
// the data root, window counts, a string→string config map, activate; and the token windows made from
// them (held-out windows default to text sampled from the model).
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/jobs/job_spec.h"
#include "core/jobs/scheduler.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"
#include "core/train/repair_train.h"
#include "core/train/train_util.h"

namespace frost::jobs {

// The window counts of a KV job, each an integer in [1, 100000]; the defaults are the kinds' (kv_repair has
// no Fisher analysis: its fisher_windows stays the unused default).
struct KvJobCounts {
  int64_t calib_windows = 64;
  int64_t eval_windows = 16;
  int64_t fisher_windows = 16;
};

struct TextJobSpec {
  std::vector<std::string> calib_texts, test_texts;
  std::string calib_path, test_path;  // resolved ("" = not given)
  KvJobCounts counts;                 // defaults filled in
  ConfigEntries config;               // "config" entries, in order
  bool activate = false;
};

// Resolves and reads the text files under `data_root` and checks the counts given (nullopt = the default):
// INVALID_ARGUMENT naming the field and value.
absl::StatusOr<TextJobSpec> parse_text_job_spec(const std::optional<std::string>& calib_path,
                                                const std::optional<std::string>& test_path,
                                                std::optional<int64_t> calib_windows,
                                                std::optional<int64_t> eval_windows,
                                                std::optional<int64_t> fisher_windows,
                                                const ConfigEntries& config, bool activate,
                                                const std::string& data_root);
// The fields of a KvRepairJobSpec / KvSpliceJobSpec, as parse_text_job_spec takes them.
template <class S>
absl::StatusOr<TextJobSpec> parse_text_job_spec(const S& spec, const std::string& data_root) {
  std::optional<int64_t> fisher_windows;
  if constexpr (std::is_same_v<S, KvSpliceJobSpec>) fisher_windows = spec.fisher_windows;
  return parse_text_job_spec(spec.calib_path, spec.test_path, spec.calib_windows, spec.eval_windows,
                             fisher_windows, spec.config, spec.activate, data_root);
}

// INVALID_ARGUMENT unless there is calibration text (or self-sampling) and each given text holds at least
// one window of `window` tokens.
absl::Status check_text_job_windows(const TextJobSpec& s, const Tokenizer& tok, int64_t window,
                                    int64_t self_sample_windows);

// The normalised spec S (KvRepairJobSpec or KvSpliceJobSpec): resolved paths, every count, activate, and
// the trainer's whole config (`config_json`, its dump) as entries.
template <class S>
absl::StatusOr<S> normalised_text_job_spec(const TextJobSpec& s, const std::string& config_json) {
  S out;
  if (!s.calib_path.empty()) out.calib_path = s.calib_path;
  if (!s.test_path.empty()) out.test_path = s.test_path;
  out.calib_windows = s.counts.calib_windows;
  out.eval_windows = s.counts.eval_windows;
  if constexpr (std::is_same_v<S, KvSpliceJobSpec>) out.fisher_windows = s.counts.fisher_windows;
  out.activate = s.activate;
  absl::StatusOr<ConfigEntries> cfg = config_entries_from_json(config_json);
  if (!cfg.ok()) return cfg.status();
  out.config = *std::move(cfg);
  return out;
}

// Calibration windows (text, then self_sample_windows sampled with seed + 3) and held-out windows (text,
// or `eval` windows sampled with seed + 2).
struct JobWindows {
  std::vector<TokenWindow> calib, eval;
};
absl::StatusOr<JobWindows> make_job_windows(const TextJobSpec& s, const LoadedModel& m, int64_t window,
                                            int64_t calib, int64_t eval, int64_t self_sample_windows,
                                            uint64_t seed);

// The KV trainers' options from a job's context: its cancel token and checkpoints, and progress reported
// as JobProgress {stage, step, steps_total, loss, kl, examples_per_s, eta_s} (ETA from the time since this
// call).
KvRepairTrainOptions kv_train_options(const JobContext& ctx, const std::string& stage);

// Publishes a KV job's artifact of `kind`: one checked file (serving::write_checked_file) plus the report,
// and the JobResult naming it (activate as the spec asked).
absl::StatusOr<JobResult> publish_checked_artifact(
    serving::ArtifactStore& store, const std::string& kind, const JobRecord& job, const std::string& backbone,
    const nlohmann::json& report, const std::string& file, const std::string& format, bool activate,
    const std::function<absl::Status(const std::string& path)>& save);

}  // namespace frost::jobs
