#include "core/common/device_spec.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace frost {

std::string DeviceSpec::name() const {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return absl::StrCat("cuda:", index);
    case DeviceKind::kReference: return "reference";
  }
  return "cpu";
}

absl::StatusOr<DeviceSpec> parse_device(const std::string& text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  if (text == "reference") {
    d.kind = DeviceKind::kReference;
    return d;
  }
  if (text == "cuda") {
    d.kind = DeviceKind::kCuda;
    return d;
  }
  int idx = -1;
  if (text.rfind("cuda:", 0) == 0 && absl::SimpleAtoi(text.substr(5), &idx) && idx >= 0 && idx < 64 &&
      text.substr(5) == std::to_string(idx)) {
    d.kind = DeviceKind::kCuda;
    d.index = idx;
    return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model.device: unknown value \"", text, "\" (expected cpu, cuda, cuda:N or reference)"));
}

}  // namespace frost
