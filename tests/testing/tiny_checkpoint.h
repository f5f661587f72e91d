#pragma once
// A tiny LLaMA checkpoint written on the fly (config.json text + named tensors), for loader and generation
// tests: V embedding rows, C = 16, 4 heads (2 KV), head_dim 4, FFN 24, 2 layers, tied embeddings, eos 2.
#include <cstdint>
#include <string>

#include "tests/testing/st_writer.h"

namespace frost::testing {

std::string tiny_llama_config_json(int64_t vocab = 64);
// Deterministic values; `dtype` is the stored dtype (kFloat, kHalf, kBFloat16).
NamedTensors tiny_llama_tensors(int64_t vocab = 64, at::ScalarType dtype = at::kFloat);

}  // namespace frost::testing
