#include "core/exec/make_executor.h"

#include "absl/strings/str_cat.h"
#include "core/exec/cpu_executor.h"
#include "core/exec/device_executor.h"
#include "core/exec/reference_decoder.h"
#ifdef FROST_WITH_CUDA_DECODER
#include "core/exec/cuda_decoder.h"
#endif

namespace frost {

bool cuda_executor_built() {
#ifdef FROST_WITH_CUDA_DECODER
  return true;
#else
  return false;
#endif
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
  DeviceOptions d;
  d.device = opts.device.index;
  d.kv = *format;
  d.cuda_graphs = opts.cuda_graphs;
  std::unique_ptr<DeviceDecoder> decoder;
  if (opts.device.kind == DeviceKind::kReference) {
    absl::StatusOr<std::unique_ptr<ReferenceDecoder>> r =
        ReferenceDecoder::create(model->config, model->model->weights(), d);
    if (!r.ok()) return r.status();
    decoder = std::move(r).value();
  } else {
#ifdef FROST_WITH_CUDA_DECODER
    absl::StatusOr<std::unique_ptr<CudaDecoder>> c = CudaDecoder::create(model->config, model->model->weights(), d);
    if (!c.ok()) return c.status();
    decoder = std::move(c).value();
#else
    return absl::FailedPreconditionError(absl::StrCat(
        "model.device ", name, ": this frostd was built without the CUDA decoder (configure with -DFROST_CUDA=ON "
        "where the CUDA Toolkit is installed; `make` does so when /usr/local/cuda/bin/nvcc exists)"));
#endif
  }
  absl::StatusOr<std::unique_ptr<DeviceExecutor>> e =
      DeviceExecutor::create(std::move(model), std::move(decoder), name, opts.kv_codec);
  if (!e.ok()) return e.status();
  return std::unique_ptr<StepExecutor>(std::move(e).value());
}

}  // namespace frost
