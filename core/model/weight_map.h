#pragma once
// Maps Hugging Face tensor names onto ModelWeights (the vLLM-style name table), checking
// every shape against the config and reporting missing and unexpected tensors by name.
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/statusor.h"
#include "core/model/model_config.h"
#include "core/store/safetensors.h"
#include "core/model/transformer.h"

namespace frost {

// Builds the weights of `cfg` from the tensors of one or more safetensors files (sharded
// checkpoints). Matrices are converted to `wdtype` (kFloat or kBFloat16); norms, biases and
// learned positions stay fp32. GPT-2 Conv1D weights ([in, out]) are transposed; q|k|v and
// gate|up are fused row-wise. Accepts GPT-2 names with or without the "transformer." prefix
// and ignores the non-parameter buffers old checkpoints carry (attn.bias, attn.masked_bias,
// rotary_emb.inv_freq). Every other missing or extra tensor is INVALID_ARGUMENT naming it.
absl::StatusOr<ModelWeights> map_weights(const ModelConfig& cfg,
                                         const std::vector<const SafetensorsFile*>& files,
                                         at::ScalarType wdtype);

}  // namespace frost
