#pragma once
// model.device as a value: "cpu", "cuda" / "cuda:N", or "reference" (the host reference device). Plain C++ and
// Abseil (no LibTorch), so that the config parser (server/server_config.cc) checks the field with it.
#include <string>

#include "absl/status/statusor.h"

namespace frost {

enum class DeviceKind { kCpu, kCuda, kReference };
struct DeviceSpec {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;             // cuda:N
  std::string name() const;  // "cpu" | "cuda:N" | "reference"
};
// INVALID_ARGUMENT naming model.device and the value for anything else ("cuda" is cuda:0; N in 0..63).
absl::StatusOr<DeviceSpec> parse_device(const std::string& text);

}  // namespace frost
