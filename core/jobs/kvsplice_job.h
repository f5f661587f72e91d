#pragma once
// The `kvsplice` job kind: calibrates a KVSplice (core/train/kvsplice_train.h) on calibration text, runs the
// Fisher analysis of the attention (core/kv/fisher.h), evaluates on held-out text and publishes a
// `kvsplice/<N>` artifact that Generate serves for requests with kv.codec = "kvsplice"
// (serving::Registry::activate → the engine's KvSpliceSlot).
//
// Spec (KvSpliceJobSpec, core/jobs/job_spec.h; frostd builds it from frost.v1.KvSpliceJobSpec; as stored):
//   {"calib_path": "a/train.jsonl",   JSONL with a "text" field per line; optional when the config asks
//                                      for self_sample_windows > 0
//    "test_path": "a/test.jsonl",      optional held-out text; default: windows sampled from the model
//    "calib_windows": 64, "eval_windows": 16, "fisher_windows": 16,
//    "config": {"rank": "16", "steps": "100", ...},   set_kvsplice_field keys; rank 0/unset = the
//                                                      Fisher-suggested rank
//    "activate": true}
//
// Report (JSON, also the artifact's report): config, rank and where it came from ("config" or
// "fisher"), Fisher metrics (FisherReport::to_json) with the suggested rank, KV bytes per token (fp16,
// kvsplice), compression vs fp16, and perplexity / mean KL to fp32 on the held-out windows for fp32,
// fp16, the PCA initialisation, the fine-tuned splice, and FIMKVSplice (temporal) when fim_rank > 0.
//
// Artifact files: the kvsplice kind's checked file (core/serving/kvsplice_kind.h), which
// serving::load_kvsplice_artifact verifies (manifest and checksum) before reading the tensors.
#include <memory>
#include <string>

#include "core/jobs/job_kind_options.h"
#include "core/jobs/scheduler.h"
#include "core/kv/kvsplice.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"

namespace frost::jobs {

struct KvSpliceJobOptions : JobKindOptions {};

class KvSpliceJobKind final : public JobKind {
 public:
  explicit KvSpliceJobKind(KvSpliceJobOptions opts) : opts_(std::move(opts)) {}
  absl::StatusOr<JobSpec> prepare(const JobSpec& spec) override;
  absl::StatusOr<JobResult> run(const JobRecord& job, const JobContext& ctx) override;

 private:
  KvSpliceJobOptions opts_;
};

}  // namespace frost::jobs
