#include "core/exec/make_executor.h"

#include "absl/strings/str_cat.h"
#include "core/exec/cpu_executor.h"
#include "core/exec/device_executor.h"
#include "core/exec/device_factory.h"

namespace frost {

bool cuda_executor_built() {
#ifdef FROST_WITH_CUDA_DECODER
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::shared_ptr<const DeviceWeights>> device_weights_for(const LoadedModel& model,
                                                                        const ExecutorOptions& opts) {
  if (opts.weights) return opts.weights;
  return upload_device_weights(model.config, model.model->weights(), opts.device);
}

absl::StatusOr<std::unique_ptr<StepExecutor>> make_executor(std::shared_ptr<const LoadedModel> model,
                                                            const ExecutorOptions& opts) {
  if (!model || !model->model) return absl::InvalidArgumentError("make_executor: no model");
  const std::string name = opts.device.name();
  if (opts.device.kind == DeviceKind::kCpu) {
    // fp16 is a device format (the CPU kernels read fp32, bf16 and the quantized ones): refused, not upcast.
    if (absl::Status st = check_weight_dtype_on_cpu(model->model->weight_format(), "model.dtype"); !st.ok())
      return st;
    return std::unique_ptr<StepExecutor>(new CpuExecutor(model));
  }
  absl::StatusOr<cuda::KvFormat> format = device_kv_format(opts.kv_codec, name);
  if (!format.ok()) return format.status();
  absl::StatusOr<std::shared_ptr<const DeviceWeights>> weights = device_weights_for(*model, opts);
  if (!weights.ok()) return weights.status();
  DeviceOptions d;
  d.kv = *format;
  d.cuda_graphs = opts.cuda_graphs;
  absl::StatusOr<std::unique_ptr<DeviceDecoder>> decoder = make_device_decoder(*std::move(weights), d);
  if (!decoder.ok()) return decoder.status();
  absl::StatusOr<std::unique_ptr<DeviceExecutor>> e =
      DeviceExecutor::create(std::move(model), *std::move(decoder), name, opts.kv_codec);
  if (!e.ok()) return e.status();
  return std::unique_ptr<StepExecutor>(std::move(e).value());
}

}  // namespace frost
