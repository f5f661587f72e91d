#include "core/serving/serving.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/common/clock.h"
#include "core/common/device.h"
#include "core/common/log.h"
#include "core/exec/device_factory.h"
#include "core/exec/hidden_states.h"
#include "core/exec/make_executor.h"
#include "kernels/cpu/isa.h"

namespace frost::serving {
namespace {

// Collects the warm-up generation's outcome.
class WarmupSink final : public TokenSink {
 public:
  void on_token(const TokenEvent&) override {}
  void on_finish(absl::StatusOr<GenerationResult> r) override {
    result = std::move(r);
    done.Notify();
  }
  absl::StatusOr<GenerationResult> result = absl::UnknownError("warm-up did not finish");
  absl::Notification done;
};

// One short greedy generation through the real engine path.
absl::Status warm_up(Engine& engine, const LoadedModel& model, const EngineConfig& ec) {
  GenerationRequest warm;
  warm.prompt_ids = {model.tokenizer && model.tokenizer->bos_id() >= 0 ? model.tokenizer->bos_id() : 0};
  warm.params.temperature = 0;
  warm.params.max_new_tokens = 2;
  warm.params.ignore_eos = true;
  // No KVSplice active yet (frostd's registry activates one after the start): a kvsplice default warms up
  // with fp32.
  if (ec.gen.kv_codec == KvCodecKind::kKvSplice &&
      (ec.kv_splice == nullptr || ec.kv_splice->get() == nullptr))
    warm.kv_codec = KvCodecKind::kF32;
  auto sink = std::make_shared<WarmupSink>();
  if (absl::Status st = engine.submit(warm, sink, std::make_shared<CancelToken>()); !st.ok())
    return absl::InternalError(absl::StrCat("warm-up generation refused: ", st.message()));
  sink->done.WaitForNotification();
  if (!sink->result.ok())
    return absl::InternalError(absl::StrCat("warm-up generation failed: ", sink->result.status().message()));
  return absl::OkStatus();
}

}  // namespace

ServingOptions ServingOptions::for_loaded(std::shared_ptr<const LoadedModel> model) {
  ServingOptions o;
  o.model = std::move(model);
  o.threads = std::nullopt;
  o.kernels.clear();
  o.warmup = false;
  o.log_name.clear();
  return o;
}

absl::StatusOr<std::unique_ptr<Serving>> Serving::start(const ServingOptions& o) {
  if (o.threads.has_value())
    if (absl::Status st = apply_device_config({*o.threads}); !st.ok()) return st;
  if (!o.kernels.empty()) {
    kernels::Isa isa = kernels::best_isa();
    if (!kernels::parse_isa(o.kernels, &isa))
      return absl::InvalidArgumentError(absl::StrCat("model.kernels: unknown value \"", o.kernels,
                                                     "\" (expected auto|avx512|avx2|scalar)"));
    if (!kernels::set_isa(isa))
      return absl::FailedPreconditionError(absl::StrCat(
          "model.kernels: \"", o.kernels, "\" needs CPU features this machine lacks (it runs up to ",
          kernels::isa_name(kernels::best_isa()), ")"));
  }
  absl::StatusOr<DeviceSpec> device = parse_device(o.device);
  if (!device.ok())
    return absl::InvalidArgumentError(absl::StrCat("model.device: ", device.status().message()));
  const int64_t t0 = RealClock::get().now_ns();
  // The executor for model.device, and on a device the source of Predict's and the jobs' backbone features:
  // a decoder of its own on that device (core/exec/hidden_states.h). A device holds the weights once: both
  // decoders borrow the DeviceWeights laid out here (core/exec/device_factory.h).
  ExecutorOptions xo;
  xo.device = *device;
  xo.kv_codec = o.engine.gen.kv_codec;
  xo.cuda_graphs = o.cuda_graphs;
  std::shared_ptr<const LoadedModel> model = o.model;
  if (!model) {
    LoadOptions lo;
    lo.dtype = o.dtype;
    absl::StatusOr<std::unique_ptr<LoadedModel>> loaded = load_model(o.model_path, lo);
    if (!loaded.ok())
      return absl::Status(loaded.status().code(),
                          absl::StrCat("model.path \"", o.model_path, "\": ", loaded.status().message()));
    if (xo.device.kind != DeviceKind::kCpu) {
      absl::StatusOr<std::shared_ptr<const DeviceWeights>> up =
          upload_device_weights((*loaded)->config, (*loaded)->model->weights(), xo.device);
      if (!up.ok()) return up.status();
      xo.weights = *std::move(up);
    }
    if (o.hidden_source) {
      absl::StatusOr<std::shared_ptr<const HiddenStateSource>> features = make_hidden_source(**loaded, xo);
      if (!features.ok()) return features.status();
      (*loaded)->hidden_source = *std::move(features);
    }
    model = std::move(loaded).value();
  }
  absl::StatusOr<std::unique_ptr<StepExecutor>> executor = make_executor(model, xo);
  if (!executor.ok()) return executor.status();
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::create(model, o.engine, std::move(executor).value());
  if (!engine.ok()) return engine.status();
  std::unique_ptr<Serving> s(new Serving());
  s->options_ = o;
  s->model_ = std::move(model);
  s->engine_ = std::move(engine).value();
  if (o.warmup)
    if (absl::Status st = warm_up(*s->engine_, *s->model_, o.engine); !st.ok()) {
      s->stopped_ = true;  // nothing was served: the engine shuts down with it, without drain lines
      return st;
    }
  s->ready_s_ = static_cast<double>(RealClock::get().now_ns() - t0) * 1e-9;
  const ExecutorStats xs = s->engine_->stats().executor;
  s->weight_bytes_ = xs.weight_bytes;
  if (!o.log_name.empty()) {
    const LoadedModel& m = *s->model_;
    FROST_LOG_INFO(
        "%s: serving %s (%s, %lld params, %s weights %.1f MiB, on %s, %s kernels, context %lld, kv %s) "
        "ready in %.2fs",
        o.log_name.c_str(), m.name.c_str(), arch_name(m.config.arch),
        static_cast<long long>(m.model->n_params()), weight_dtype_name(m.model->weight_format()),
        static_cast<double>(xs.weight_bytes) / (1 << 20), xs.device_name.c_str(),
        kernels::isa_name(kernels::active_isa()), static_cast<long long>(s->engine_->max_context()),
        kv_codec_name(o.engine.gen.kv_codec), s->ready_s_);
  }
  return s;
}

Serving::~Serving() { stop(); }

bool Serving::drain(double timeout_s) {
  if (stopped_) return true;
  stopped_ = true;
  engine_->stop_accepting();
  const EngineStats s = engine_->stats();
  const char* name = options_.log_name.c_str();
  if (!options_.log_name.empty())
    FROST_LOG_INFO("%s: draining %d running + %d waiting requests (timeout %.1fs)", name, s.n_running,
                   s.n_waiting, timeout_s);
  const bool idle = engine_->wait_idle(timeout_s);
  if (!idle && !options_.log_name.empty()) {
    const EngineStats left = engine_->stats();
    FROST_LOG_WARN("%s: drain timeout: cancelling %d running + %d waiting requests", name, left.n_running,
                   left.n_waiting);
  }
  engine_->shutdown();  // every remaining request gets its final message (CANCELLED)
  return idle;
}

}  // namespace frost::serving
