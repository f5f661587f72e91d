#pragma once
// The one place a device decoder is made (make_executor and the features' make_hidden_source both come here):
// a model's weights are laid out on a device once (upload_device_weights), and every decoder on that device
// borrows them (make_device_decoder), so the engine's decoder and Predict's features share one copy.
//
//   kReference  ReferenceWeights / ReferenceDecoder (core/exec/reference_decoder.h), the host twin
//   kCuda       CudaWeights / CudaDecoder (core/exec/cuda_decoder.h), built with FROST_CUDA only
#include <memory>

#include "absl/status/statusor.h"
#include "core/common/device_spec.h"
#include "core/exec/device_decoder.h"

namespace frost {

// FAILED_PRECONDITION naming what the device cannot run (device_supports), a missing int8 form, no CUDA in
// this build or no such GPU, or device memory short by the bytes asked for. INVALID_ARGUMENT for the cpu.
absl::StatusOr<std::shared_ptr<const DeviceWeights>> upload_device_weights(const ModelConfig& cfg,
                                                                           const ModelWeights& w,
                                                                           const DeviceSpec& device);
// A decoder (its stream, KV pool and step buffers still to allocate) over weights from upload_device_weights;
// opts.device is taken from the weights. FAILED_PRECONDITION when the device cannot make one.
absl::StatusOr<std::unique_ptr<DeviceDecoder>> make_device_decoder(
    std::shared_ptr<const DeviceWeights> weights, const DeviceOptions& opts);

}  // namespace frost
