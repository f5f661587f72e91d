#pragma once
// The spec fields the KV job kinds (kv_repair, kvsplice) share: calibration / held-out text files under
// the data root, window counts, a string→string config map, activate; and the token windows made from
// them (held-out windows default to text sampled from the model).
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/jobs/artifact_store.h"
#include "core/jobs/scheduler.h"
#include "core/train/repair_train.h"
#include "core/train/train_util.h"
#include "core/model/model_loader.h"

namespace frost::jobs {

struct TextJobSpec {
  std::vector<std::string> calib_texts, test_texts;
  std::string calib_path, test_path;                        // resolved ("" = not given)
  std::vector<std::pair<std::string, int64_t>> counts;      // the count fields, defaults filled in
  std::vector<std::pair<std::string, std::string>> config;  // "config" entries, in order
  bool activate = false;
  int64_t count(const std::string& name) const;
};

// Parses the shared fields; `counts` names the integer fields in [1, 100000] with their defaults. Unknown
// top-level fields are INVALID_ARGUMENT naming them.
absl::StatusOr<TextJobSpec> parse_text_job_spec(const nlohmann::json& spec, const std::string& data_root,
                                                const std::vector<std::pair<std::string, int64_t>>& counts);

// INVALID_ARGUMENT unless there is calibration text (or self-sampling) and each given text holds at least
// one window of `window` tokens.
absl::Status check_text_job_windows(const TextJobSpec& s, const Tokenizer& tok, int64_t window,
                                    int64_t self_sample_windows);

// The normalised spec: resolved paths, counts, activate and the config (as strings, from config_json).
nlohmann::json normalised_text_job_spec(const TextJobSpec& s, const std::string& config_json);

// Calibration windows (text, then self_sample_windows sampled with seed + 3) and held-out windows (text,
// or `eval` windows sampled with seed + 2).
struct JobWindows {
  std::vector<TokenWindow> calib, eval;
};
absl::StatusOr<JobWindows> make_job_windows(const TextJobSpec& s, const LoadedModel& m, int64_t window,
                                            int64_t calib, int64_t eval, int64_t self_sample_windows,
                                            uint64_t seed);

// An artifact's checked file: `save` writes dir/file, then manifest.json {"format", "file", "sha256",
// "bytes"} is written last (write_checked_file). verify_checked_file reads the manifest back, checks its
// format and file name and the file's sha256 (DATA_LOSS naming the file otherwise) and returns the file's
// path.
absl::Status write_checked_file(const std::string& dir, const std::string& file, const std::string& format,
                                const std::function<absl::Status(const std::string& path)>& save);
absl::StatusOr<std::string> verify_checked_file(const std::string& dir, const std::string& file,
                                                const std::string& format);

// The KV trainers' options from a job's context: its cancel token and checkpoints, and progress reported
// as {"stage", step, steps_total, loss, kl, examples_per_s, eta_s} (ETA from the time since this call).
KvRepairTrainOptions kv_train_options(const JobContext& ctx, const std::string& stage);

// Publishes a KV job's artifact of `kind`: one checked file (write_checked_file) plus the report, and the
// JobResult naming it (activate as the spec asked).
absl::StatusOr<JobResult> publish_checked_artifact(
    ArtifactStore& store, const std::string& kind, const JobRecord& job, const std::string& backbone,
    const nlohmann::json& report, const std::string& file, const std::string& format, bool activate,
    const std::function<absl::Status(const std::string& path)>& save);

}  // namespace frost::jobs
