#include "core/exec/device_factory.h"

#include "absl/strings/str_cat.h"
#include "core/exec/reference_decoder.h"
#ifdef FROST_WITH_CUDA_DECODER
#include "core/exec/cuda_decoder.h"
#endif

namespace frost {

absl::StatusOr<std::shared_ptr<const DeviceWeights>> upload_device_weights(const ModelConfig& cfg,
                                                                           const ModelWeights& w,
                                                                           const DeviceSpec& device) {
  switch (device.kind) {
    case DeviceKind::kCpu:
      return absl::InvalidArgumentError(
          "upload_device_weights: the cpu serves the loaded weights themselves");
    case DeviceKind::kReference: {
      absl::StatusOr<std::shared_ptr<const ReferenceWeights>> r = ReferenceWeights::create(cfg, w);
      if (!r.ok()) return r.status();
      return std::shared_ptr<const DeviceWeights>(*std::move(r));
    }
    case DeviceKind::kCuda: {
#ifdef FROST_WITH_CUDA_DECODER
      absl::StatusOr<std::shared_ptr<const CudaWeights>> c = CudaWeights::create(cfg, w, device.index);
      if (!c.ok()) return c.status();
      return std::shared_ptr<const DeviceWeights>(*std::move(c));
#else
      return absl::FailedPreconditionError(absl::StrCat(
          "model.device ", device.name(),
          ": this frostd was built without the CUDA decoder (configure with "
          "-DFROST_CUDA=ON where the CUDA Toolkit is installed; `make` does so when /usr/local/cuda/bin/nvcc "
          "exists)"));
#endif
    }
  }
  return absl::InvalidArgumentError("upload_device_weights: unknown device kind");
}

absl::StatusOr<std::unique_ptr<DeviceDecoder>> make_device_decoder(
    std::shared_ptr<const DeviceWeights> weights, const DeviceOptions& opts) {
  if (!weights) return absl::InvalidArgumentError("make_device_decoder: no weights");
  DeviceOptions o = opts;
  o.device = weights->device().index;
  if (auto r = std::dynamic_pointer_cast<const ReferenceWeights>(weights))
    return std::unique_ptr<DeviceDecoder>(new ReferenceDecoder(std::move(r), o));
#ifdef FROST_WITH_CUDA_DECODER
  if (auto c = std::dynamic_pointer_cast<const CudaWeights>(weights)) {
    absl::StatusOr<std::unique_ptr<CudaDecoder>> d = CudaDecoder::create(std::move(c), o);
    if (!d.ok()) return d.status();
    return std::unique_ptr<DeviceDecoder>(*std::move(d));
  }
#endif
  return absl::FailedPreconditionError(absl::StrCat("model.device ", weights->device().name(),
                                                    ": no decoder for these weights in this build"));
}

}  // namespace frost
