#pragma once
// Training and evaluation of the KV repair operators (docs/kv_repair.md) on a
// frozen model: the library behind the `kv_repair` job kind and `frost-bench kv-repair`.
//
// Data: token windows (BOS + `window - 1` tokens). make_text_windows() cuts the tokenized calibration
// texts (BOS-joined, in order) into windows; sample_windows() draws text from the model itself
// (temperature 1, seeded).
//
// Objective per window w (teacher-forced, every position t):
//   KL(p_clean(· | w<=t) ‖ p_repaired(· | w<=t))  averaged over positions
//   + attention_weight · Σ_protected ‖att_rep − att_clean‖² / ‖att_clean‖²   (optional)
//   + contraction_weight · contraction regularizer (option A; core/kv/repair.h)
// where "clean" is the fp32 cache without corruption and "repaired" the configured codec, then the
// corruption (if any), then R_phi on the protected layers. Gradients reach R_phi through the frozen
// model; the codec and the corruption pass them straight through (Transformer::forward).
// Optimiser (choice): Adam (β 0.9/0.999, ε 1e-8, no weight decay), constant lr, global-norm clip 1.0,
// `batch` windows per step drawn without replacement per step from a generator seeded with
// (seed, step), so a resumed run draws the same batches.
// Checkpoints: safetensors of the parameters and Adam moments with the step in the metadata,
// written atomically; a run given an existing checkpoint resumes from it.
//
// Evaluation: perplexity of the next token and mean KL to the clean fp32 model over every position of
// the windows, for any (codec, corruption, repair) triple.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/cancel.h"
#include "core/kv/corruption.h"
#include "core/kv/kv_spec.h"
#include "core/kv/repair_set.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/train/train_util.h"

namespace frost {

struct KvRepairConfig {
  RepairConfig repair;         // option A|B|C, rank, apply_to, alpha_max, contraction_rho
  std::string layers = "mid";  // parse_repair_layers
  KvCodecKind codec = KvCodecKind::kInt4;
  CorruptionSpec corruption;  // on top of the codec; none by default
  int64_t window = 64;        // tokens per window (BOS included)
  int64_t steps = 200;
  int64_t batch = 4;  // windows per step
  double lr = 3e-3;
  double contraction_weight = 0.01;  // option A only
  double attention_weight = 0;       // attention-output error term
  int64_t self_sample_windows = 0;   // extra calibration windows sampled from the model
  uint64_t seed = 0;
};

// key=value overrides of every field (keys: kv_repair_config_keys()). One field table in repair_train.cc
// (core/common/config_fields.h) drives the parsing, the known keys, the ranges and kv_repair_config_json.
// INVALID_ARGUMENT naming the key, the value and the range.
absl::Status set_kv_repair_field(KvRepairConfig& cfg, const std::string& key, const std::string& value);
std::vector<std::string> kv_repair_config_keys();
// Checks every field's range and the model (rank <= head_dim, layers < n_layer, window <= max_pos, ...).
absl::Status validate_kv_repair_config(const KvRepairConfig& cfg, const ModelConfig& model);
std::string kv_repair_config_json(const KvRepairConfig& cfg);

// The "text" field of every line of a JSONL file (other fields ignored; blank lines skipped). Errors
// name the file and line: unreadable, not a JSON object, no string "text", not UTF-8, over max_bytes.
absl::StatusOr<std::vector<std::string>> load_text_jsonl(const std::string& path,
                                                         int64_t max_bytes = 256 << 20);

// Tokenizes `texts` (BOS before each when the tokenizer has one), concatenates, and cuts windows of
// exactly `window` tokens (the tail shorter than a window is dropped), at most max_windows (0 = all).
absl::StatusOr<std::vector<TokenWindow>> make_text_windows(const Tokenizer& tok,
                                                           const std::vector<std::string>& texts,
                                                           int64_t window, int64_t max_windows = 0);
// n windows sampled from the model at temperature 1 (starting from BOS or token 0), seeded.
absl::StatusOr<std::vector<TokenWindow>> sample_windows(const Transformer& model, int32_t bos, int64_t n,
                                                        int64_t window, uint64_t seed);

struct KvRepairProgress {
  int64_t step = 0, steps = 0;
  double loss = 0, kl = 0;  // this step's mean
  double windows_per_s = 0;
};

struct KvRepairTrainOptions {
  const CancelToken* cancel = nullptr;
  std::string checkpoint_path;  // "" = no checkpoints; resume when it exists
  int64_t checkpoint_every = 0;
  std::function<void(const KvRepairProgress&)> progress;
};

// Trains a fresh RepairSet. CANCELLED (after writing a checkpoint when a path is set) when the token
// fires. The windows must all have cfg.window tokens.
absl::StatusOr<std::shared_ptr<RepairSet>> train_kv_repair(const Transformer& model,
                                                           const KvRepairConfig& cfg,
                                                           const std::vector<TokenWindow>& windows,
                                                           const KvRepairTrainOptions& opts = {});

struct KvEval {
  double ppl = 0;      // exp(mean next-token NLL)
  double mean_kl = 0;  // mean over positions of KL(p_clean_fp32 ‖ p)
  int64_t positions = 0;
};
struct KvEvalCase {
  KvCodecKind codec = KvCodecKind::kF32;
  CorruptionSpec corruption;
  std::shared_ptr<const RepairSet> repair;
  std::shared_ptr<const KvSpliceSet> splice;    // the kvsplice codec's splices
  std::shared_ptr<const FimKvSplice> temporal;  // FIMKVSplice temporal compression (KvStudy::temporal)
};
// Teacher-forced evaluation of each (codec, corruption, repair) case on the windows (reference path).
// The clean fp32 pass runs once per window for all cases (and is reused for a clean case).
absl::StatusOr<std::vector<KvEval>> evaluate_kv(const Transformer& model,
                                                const std::vector<TokenWindow>& windows,
                                                const std::vector<KvEvalCase>& cases);
// One case.
absl::StatusOr<KvEval> evaluate_kv(const Transformer& model, const std::vector<TokenWindow>& windows,
                                   KvCodecKind codec, const CorruptionSpec& corruption,
                                   std::shared_ptr<const RepairSet> repair);

}  // namespace frost
