#pragma once
// The decoder families frost serves, read from config.json by their Hugging Face field names (internal to
// core/model: model_config.cc calls these). One table names each family's "architectures" entry and
// "model_type"; the LLaMA-shaped families (Llama 2/3.x, SmolLM2, TinyLlama, Mistral, Qwen 2/2.5/3, Gemma 2/3,
// Phi-3/3.5/4-mini) share one parser whose per-family defaults are HF's config-class defaults.
#include <string>

#include "absl/status/status.h"
#include "core/model/hf_config_fields.h"
#include "core/model/model_config.h"

namespace frost {

// Refuses what frost does not serve, naming the field and its value: mixture-of-experts layers
// (num_local_experts, num_experts, n_routed_experts), vision towers (vision_config, text_config), state-space
// layers. Runs before the architecture is looked at, so the message says why rather than "unsupported
// architecture".
absl::Status refuse_unsupported_layers(const hf_config::Fields& f);

// Sets c->family, c->arch and c->architecture from "architectures" (the first supported entry) or, without
// it, "model_type". INVALID_ARGUMENT listing the supported names otherwise.
absl::Status detect_family(const hf_config::Fields& f, ModelConfig* c);

// The LLaMA-shaped families' fields (c->family set).
absl::Status parse_llama_family(const hf_config::Fields& f, ModelConfig* c);

// "LlamaForCausalLM, MistralForCausalLM, ..., GPT2LMHeadModel" for messages.
std::string supported_architectures();

}  // namespace frost
