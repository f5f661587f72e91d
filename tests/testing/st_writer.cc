#include "tests/testing/st_writer.h"

#include <stdexcept>

#include "core/store/safetensors.h"
#include "tests/testing/test_util.h"

namespace frost::testing {

std::string safetensors_bytes(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<std::string> out = safetensors_serialize(tensors, metadata);
  if (!out.ok()) throw std::runtime_error(std::string(out.status().message()));
  return *std::move(out);
}

void write_model_dir(const std::string& dir, const std::string& config_json, const NamedTensors& tensors) {
  write_text_file(dir + "/config.json", config_json);
  write_text_file(dir + "/model.safetensors", safetensors_bytes(tensors));
}

}  // namespace frost::testing
