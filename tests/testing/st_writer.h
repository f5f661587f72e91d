#pragma once
// Writes safetensors files for tests (the project itself only reads them in this issue).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

namespace frost::testing {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Serializes tensors (kFloat → F32, kHalf → F16, kBFloat16 → BF16) in the given order with
// contiguous offsets. Returns the whole file.
std::string safetensors_bytes(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes <dir>/config.json and <dir>/model.safetensors.
void write_model_dir(const std::string& dir, const std::string& config_json, const NamedTensors& tensors);

}  // namespace frost::testing
