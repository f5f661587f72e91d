#pragma once
// The `prototype` job kind: Stage A → cache → Stage B → finalize (core/prototype) → evaluation on a
// held-out split → a published artifact.
//
// Spec (PrototypeJobSpec, core/jobs/job_spec.h; frostd builds it from frost.v1.PrototypeJobSpec; as stored):
//   {"train_path": "a/train.jsonl"        | "inline_rows": [{"text": .., "label": .., "id": ..}, ...],
//    "test_path": "a/test.jsonl",           optional held-out split
//    "holdout_fraction": 0.1,               used when there is no test_path; 0 = no evaluation
//    "label_min": a, "label_max": b,        optional; default: meta.json beside train_path
//    "config": {"K": "16", ...},            PrototypeConfig overrides (set_fields)
//    "activate": true}
// prepare() resolves the paths under the data root (refusing anything outside it), reads the label
// bounds, parses every row (errors name the file and line; inline rows are "inline_rows[i]"),
// applies the config overrides and checks them against the data (K <= rows), and returns the
// normalised spec with absolute paths and explicit bounds.
//
// Holdout (choice): the first round(f·N) rows of a permutation drawn with the config's seed
// (std::mt19937_64) are held out; the rest train.
#include <memory>
#include <string>

#include "core/jobs/job_kind_options.h"
#include "core/jobs/scheduler.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"

namespace frost::jobs {

struct PrototypeJobOptions : JobKindOptions {
  int64_t max_inline_rows = 20000;
  int64_t max_inline_bytes = 16 << 20;  // text bytes of all inline rows
};

class PrototypeJobKind final : public JobKind {
 public:
  explicit PrototypeJobKind(PrototypeJobOptions opts) : opts_(std::move(opts)) {}
  absl::StatusOr<JobSpec> prepare(const JobSpec& spec) override;
  absl::StatusOr<JobResult> run(const JobRecord& job, const JobContext& ctx) override;

 private:
  PrototypeJobOptions opts_;
};

}  // namespace frost::jobs
