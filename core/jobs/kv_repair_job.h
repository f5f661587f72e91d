#pragma once
// The `kv_repair` job kind: trains KV repair operators (core/train/repair_train.h) on calibration text,
// evaluates them on held-out text, and publishes a `kv_repair/<N>` artifact that Generate can serve
// (serving::Registry::activate → the engine's RepairSlot).
//
// Spec (KvRepairJobSpec, core/jobs/job_spec.h; frostd builds it from frost.v1.KvRepairJobSpec; as stored):
//   {"calib_path": "a/train.jsonl",   JSONL with a "text" field per line; optional when the config
//                                      asks for self_sample_windows > 0
//    "test_path": "a/test.jsonl",      optional held-out text; default: windows sampled from the model
//    "calib_windows": 64, "eval_windows": 16,
//    "config": {"codec": "int4", "layers": "mid", "steps": "200", ...},   set_kv_repair_field keys
//    "activate": true}
// prepare() resolves the paths under the data root, reads every line, applies and validates the config
// against the served model, checks there is text for at least one window, and returns the normalised spec.
//
// Artifact files: the kv_repair kind's checked file (core/serving/kv_repair_kind.h), which
// serving::load_kv_repair_artifact verifies (manifest and checksum) before reading the tensors.
#include <memory>
#include <string>

#include "core/jobs/job_kind_options.h"
#include "core/jobs/scheduler.h"
#include "core/kv/repair_set.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"

namespace frost::jobs {

struct KvRepairJobOptions : JobKindOptions {};

class KvRepairJobKind final : public JobKind {
 public:
  explicit KvRepairJobKind(KvRepairJobOptions opts) : opts_(std::move(opts)) {}
  absl::StatusOr<JobSpec> prepare(const JobSpec& spec) override;
  absl::StatusOr<JobResult> run(const JobRecord& job, const JobContext& ctx) override;

 private:
  KvRepairJobOptions opts_;
};

}  // namespace frost::jobs
