#include "tests/testing/st_writer.h"

#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "tests/testing/test_util.h"

namespace frost::testing {

std::string safetensors_bytes(const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& [name, t0] : tensors) {
    at::Tensor t = t0.contiguous().cpu();
    const char* dt = t.scalar_type() == at::kFloat      ? "F32"
                     : t.scalar_type() == at::kHalf     ? "F16"
                     : t.scalar_type() == at::kBFloat16 ? "BF16"
                                                        : nullptr;
    if (!dt) throw std::runtime_error("safetensors_bytes: unsupported dtype for " + name);
    const size_t begin = data.size();
    const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
    data.append(static_cast<const char*>(t.data_ptr()), nbytes);
    header[name] = {{"dtype", dt}, {"shape", t.sizes().vec()}, {"data_offsets", {begin, begin + nbytes}}};
  }
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');  // alignment padding, as the reference writer does
  std::string out(8, '\0');
  uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  out += h;
  out += data;
  return out;
}

void write_model_dir(const std::string& dir, const std::string& config_json, const NamedTensors& tensors) {
  write_text_file(dir + "/config.json", config_json);
  write_text_file(dir + "/model.safetensors", safetensors_bytes(tensors));
}

}  // namespace frost::testing
