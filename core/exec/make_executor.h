#pragma once
// The executor for model.device (core/exec/step_executor.h): "cpu" → CpuExecutor; "reference" → the host
// reference device; "cuda:N" → the CUDA decoder on GPU N (builds with FROST_CUDA; elsewhere
// FAILED_PRECONDITION saying so). Device executors store the KV pool in one format, `kv_codec`
// (engine.kv_codec), and are refused with the reason for a model they cannot run (device_supports); the CPU
// refuses fp16 weights, a device format (check_weight_dtype_on_cpu).
#include <memory>

#include "absl/status/statusor.h"
#include "core/exec/device_decoder.h"
#include "core/exec/step_executor.h"
#include "core/model/model_loader.h"

namespace frost {

struct ExecutorOptions {
  DeviceSpec device;
  // A device's weights, already laid out (device_factory.h: upload_device_weights), to share with the features'
  // decoder (hidden_states.h); uploaded here when empty.
  std::shared_ptr<const DeviceWeights> weights;
  KvCodecKind kv_codec = KvCodecKind::kF32;
  bool cuda_graphs = true;  // the CUDA decoder replays captured steps (bounded buckets)
};

// opts.weights, or (when empty) the model's weights laid out on opts.device now (device_factory.h).
absl::StatusOr<std::shared_ptr<const DeviceWeights>> device_weights_for(const LoadedModel& model,
                                                                        const ExecutorOptions& opts);

absl::StatusOr<std::unique_ptr<StepExecutor>> make_executor(std::shared_ptr<const LoadedModel> model,
                                                            const ExecutorOptions& opts);

// Whether this build can run model.device cuda (FROST_CUDA).
bool cuda_executor_built();

}  // namespace frost
