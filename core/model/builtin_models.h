#pragma once
// Built-in models that need no files (like vLLM's dummy loader): deterministic random weights
// from a fixed seed and the built-in byte-level tokenizer, so prompts and outputs are text.
//   builtin:tiny       LLaMA family, 2 layers, dim 64, 4 heads / 2 kv heads (GQA), vocab 512,
//                      untied lm_head
//   builtin:tiny-gpt2  GPT-2 family, 2 layers, dim 64, 4 heads, vocab 512, untied lm_head
//   builtin:15m        shaped like TinyStories-15M: dim 288, 6 layers, 6 heads, SwiGLU 768,
//                      vocab 32000, tied embeddings (max_pos 1024 so long benchmarks fit)
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/model_config.h"
#include "core/model/transformer.h"

namespace frost {

std::vector<std::string> builtin_model_names();

// INVALID_ARGUMENT naming the known names for an unknown builtin.
absl::StatusOr<ModelConfig> builtin_config(const std::string& name);

// Deterministic random weights for `cfg` (same seed → same bits on every platform: drawn
// with our own splitmix64 generator, not a library distribution). Matrices are uniform with
// std 1/sqrt(fan_in), embeddings std 0.05, norm weights 1 (+ small noise), biases small;
// untied heads give logits of std ~2.5 and never favour non-printable byte tokens. The tensors of
// cfg.variants, when it declares any, come from a separate generator (the plain ones are unchanged).
ModelWeights random_weights(const ModelConfig& cfg, uint64_t seed, at::ScalarType wdtype);

}  // namespace frost
