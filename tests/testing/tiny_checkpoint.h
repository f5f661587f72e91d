#pragma once
// A tiny LLaMA checkpoint written on the fly (config.json text + named tensors), for loader and generation
// tests: V embedding rows, C = 16, 4 heads (2 KV), head_dim 4, FFN 24, 2 layers, tied embeddings, eos 2.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/testing/st_writer.h"

namespace frost::testing {

// Deterministic values: sin(0.37·i + salt)·scale over the elements, in `shape`.
at::Tensor tiny_param(std::vector<int64_t> shape, int64_t salt, double scale = 0.5);
nlohmann::ordered_json tiny_llama_config(int64_t vocab = 64, int64_t max_pos = 64);
std::string tiny_llama_config_json(int64_t vocab = 64);
// Deterministic values (tiny_param, salts 1, 2, … in name order); `dtype` is the stored dtype (kFloat, kHalf,
// kBFloat16); with_lm_head adds an untied lm_head.weight last.
NamedTensors tiny_llama_tensors(int64_t vocab = 64, at::ScalarType dtype = at::kFloat, double scale = 0.5,
                                bool with_lm_head = false);
// A byte-free BPE tokenizer.json of 94 entries: the printable ASCII characters, '!' = 0 ... '~' = 93 (longer
// than the 64-row default embedding, as Gemma 3's tokenizer is one entry longer than its rows).
std::string ascii_tokenizer_json();

}  // namespace frost::testing
