#pragma once
// Frozen-backbone features and the feature cache.
//
// H(x) is the backbone's final-layer hidden state after the final norm (not logits), one row
// per token, for the text tokenized with BOS and truncated to S tokens. The backbone is frozen,
// so H(x) is the same every epoch: FeatureCache computes it once per training run and keeps it
// in fp16 (the design's feature cache), in memory while it fits `budget_bytes`, otherwise in a
// spill file read back per batch. Rows are ragged (each text keeps its own length); batches are
// right-padded with a validity mask that every attention downstream honours. The in-memory rows and every
// batch live on Options::device (the head's compute device, core/prototype/device.h); the spill file is host
// storage, its rows copied to the device per batch.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/cancel.h"
#include "core/model/model_loader.h"

namespace frost::prototype {

// Identity of the frozen backbone an artifact was trained on: Predict refuses another one.
struct BackboneId {
  std::string name;  // LoadedModel::name, informative only
  std::string arch;  // "llama" | "gpt2"
  int64_t dim = 0, n_layer = 0, n_vocab = 0;
  std::string fingerprint;  // 16 hex digits: FNV-1a 64 over config sizes and every weight byte
  // The weight format the features came from ("fp32" | "bf16" | "int8" | "int4"): a head trained on an
  // int8 backbone says so, and serves only there (the fingerprint of quantized weights is that of their
  // dequantized values, which differ from the checkpoint's).
  std::string weights = "fp32";
  bool same_backbone(const BackboneId& o) const {
    return arch == o.arch && dim == o.dim && n_layer == o.n_layer && n_vocab == o.n_vocab &&
           fingerprint == o.fingerprint && weights == o.weights;
  }
  std::string describe() const;
};
BackboneId backbone_id(const LoadedModel& model);

// A padded batch of hidden states.
struct FeatureBatch {
  at::Tensor h;     // [B, Smax, d_model] fp32
  at::Tensor mask;  // [B, Smax] bool, true = real token
};

// Tokenizes `text` (BOS prepended when the tokenizer has one) and truncates to max_tokens.
absl::StatusOr<std::vector<int32_t>> tokenize_truncated(const LoadedModel& model, const std::string& text,
                                                        int64_t max_tokens);

// Final-norm hidden states [n, d_model] fp32 of one token sequence (1 <= n <= max_pos): from the served
// device's decoder when the model has a hidden_source (model.device other than cpu), else the CPU reference
// forward.
absl::StatusOr<at::Tensor> backbone_hidden(const LoadedModel& model, const std::vector<int32_t>& tokens);

// Hidden states of several texts, padded: what Predict runs per request.
absl::StatusOr<FeatureBatch> encode_texts(const LoadedModel& model, const std::vector<std::string>& texts,
                                          int64_t max_tokens);

class FeatureCache {
 public:
  struct Options {
    int64_t max_tokens = 256;
    int64_t budget_bytes = 4LL << 30;  // in-memory fp16 bytes; beyond → spill file
    std::string spill_dir;             // "" = $TMPDIR or /tmp
    at::Device device = at::kCPU;      // where the in-memory rows and the batches live
  };
  // Called after every text: (done, total). May be empty.
  using ProgressFn = std::function<void(int64_t, int64_t)>;

  // Runs the backbone over every text. CANCELLED when `cancel` fires between texts.
  static absl::StatusOr<std::unique_ptr<FeatureCache>> build(const LoadedModel& model,
                                                             const std::vector<std::string>& texts,
                                                             const Options& opts,
                                                             const CancelToken* cancel = nullptr,
                                                             const ProgressFn& progress = {});
  ~FeatureCache();
  FeatureCache(const FeatureCache&) = delete;
  FeatureCache& operator=(const FeatureCache&) = delete;

  int64_t size() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t d_model() const { return d_model_; }
  int64_t length(int64_t i) const { return lengths_[static_cast<size_t>(i)]; }
  int64_t bytes() const { return total_rows_ * d_model_ * 2; }
  bool spilled() const { return fd_ >= 0; }
  const std::string& spill_path() const { return spill_path_; }
  at::Device device() const { return device_; }

  // Rows `indices` as one padded batch on device(). Thread-compatible (const, pread on spill).
  FeatureBatch batch(const std::vector<int64_t>& indices) const;
  // Mean over the real tokens of example i: [d_model] double (the ridge baseline's feature; the
  // head's probe pools in double too, so both see the same numbers to the last bits), on device() (a spilled
  // row: on the CPU).
  at::Tensor mean_pooled(int64_t i) const;

 private:
  FeatureCache() = default;
  at::Tensor row(int64_t i) const;  // [len_i, d_model] fp16 (device_ in memory, the CPU when spilled)

  int64_t d_model_ = 0;
  int64_t total_rows_ = 0;
  std::vector<int64_t> lengths_, offsets_;  // offsets in rows
  at::Tensor memory_;                       // [total_rows, d_model] fp16 on device_ when in memory
  at::Device device_ = at::kCPU;
  int fd_ = -1;  // spill file (unlinked on destruction)
  std::string spill_path_;
};

}  // namespace frost::prototype
