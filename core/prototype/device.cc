#include "core/prototype/device.h"

#include "absl/strings/str_cat.h"
#include "core/common/device_spec.h"

namespace frost::prototype {

ComputeDevice cpu_compute_device() {
  ComputeDevice d;
  d.reason = "the CPU, asked for explicitly";
  return d;
}

ComputeDevice resolve_compute_device(const std::string& served, bool cuda_available) {
  ComputeDevice d;  // the CPU unless a cuda model meets a CUDA LibTorch
  // model.device's own parser (the value was checked at config load; anything it refuses computes here on
  // the CPU, with the reason).
  const absl::StatusOr<DeviceSpec> spec = parse_device(served.empty() ? "cpu" : served);
  if (!spec.ok()) {
    d.reason = absl::StrCat("model.device ", served, " is not a CUDA device");
    return d;
  }
  switch (spec->kind) {
    case DeviceKind::kCpu:
      d.reason = "model.device is cpu";
      return d;
    case DeviceKind::kReference:
      d.reason = "model.device is the host reference device (its features are in host memory)";
      return d;
    case DeviceKind::kCuda:
      break;
  }
  if (!cuda_available) {
    d.reason = absl::StrCat(
        "model.device is ", served,
        " but this LibTorch has no CUDA backend (CPU-only LibTorch, or FROST_TORCH_CUDA=OFF; the "
        "CUDA decoder needs none, the prototype head does)");
    return d;
  }
  d.device = at::Device(at::kCUDA, static_cast<at::DeviceIndex>(spec->index));
  d.name = spec->name();
  d.reason = absl::StrCat("model.device is ", served, " and LibTorch has CUDA");
  return d;
}

std::string served_device(const LoadedModel& model) {
  return model.hidden_source ? model.hidden_source->device() : std::string("cpu");
}

ComputeDevice compute_device(const LoadedModel& model) {
  return resolve_compute_device(served_device(model), at::hasCUDA());
}

}  // namespace frost::prototype
