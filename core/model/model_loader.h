#pragma once
// load_model(): a Hugging Face checkpoint directory (config.json + *.safetensors + tokenizer)
// or a built-in model ("builtin:tiny", "builtin:tiny-gpt2", "builtin:15m").
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/generation_config.h"
#include "core/model/model_config.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"

namespace frost {

struct LoadOptions {
  // Weights are converted (bf16, fp16) or quantized (int8, int4) at load. fp16 is a device format: the model
  // loads (its matrices as at::kHalf) for a device decoder; the CPU path refuses it (weight_dtype_on_cpu).
  WeightDtype dtype = WeightDtype::kF32;
  int64_t int8_group = 32;                // int8: inputs per scale, 0 = per output channel (kInt8Group)
  TokenizerPreference tokenizer = TokenizerPreference::kAuto;
};

// Computes the backbone's final-norm hidden states of a token sequence somewhere other than the CPU reference
// forward: the served device's own decoder (core/exec/hidden_states.h). Predict and the prototype jobs' feature
// cache ask through core/prototype/features.h backbone_hidden(). Thread-safe (calls may be serialized inside).
class HiddenStateSource {
 public:
  virtual ~HiddenStateSource() = default;
  virtual std::string device() const = 0;  // "cuda:0", "reference"
  // [n, C] fp32 in host memory, 1 <= n <= max_pos.
  virtual absl::StatusOr<at::Tensor> hidden(const std::vector<int32_t>& tokens) const = 0;
};

struct LoadedModel {
  std::string name;    // "stories260K" (directory name) or "builtin:tiny"
  std::string source;  // absolute directory, or the builtin name
  ModelConfig config;
  std::unique_ptr<Transformer> model;      // immutable after load, shared read-only
  std::unique_ptr<Tokenizer> tokenizer;
  // generation_config.json (core/model/generation_config.h): its eos ids are already in config.eos_ids; its
  // sampling defaults fill what a request leaves unset (sampling_defaults(), core/generate/sampling_params.h).
  // Empty for builtins and checkpoints without the file.
  GenerationDefaults generation;
  double t_load_s = 0;
  // Where backbone features come from (set by the server for model.device other than cpu, before the model is
  // shared); null = Transformer::forward on the CPU.
  std::shared_ptr<const HiddenStateSource> hidden_source;
};

// OK when every id lies in [0, n_vocab) (the model's embedding rows), else INVALID_ARGUMENT
// "<what>[i] = token id N is out of range [0, V): ..." — a tokenizer may hold more entries than the embedding has
// rows (Gemma 3), and a text prompt that encodes to one of those ids cannot be fed to the model.
absl::Status check_token_ids(const std::vector<int32_t>& ids, int64_t n_vocab, const std::string& what);

// Sharded checkpoints (model.safetensors.index.json), generation_config.json and the tokenizer: see
// core/model/checkpoint_files.h, core/model/generation_config.h and README.md "Loading a model".
// Errors: NOT_FOUND (missing directory/config.json/weights, a shard the index names), INVALID_ARGUMENT for malformed
// files naming the file and tensor ("model.safetensors: tensor 'model.norm.weight' has shape
// [32], expected [64]"), "unsupported format: use safetensors" for .bin/pickle/TorchScript.
absl::StatusOr<std::unique_ptr<LoadedModel>> load_model(const std::string& path_or_builtin,
                                                        const LoadOptions& opts = {});

}  // namespace frost
