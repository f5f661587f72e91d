#pragma once
// Serving: the model and the engine that serves it, assembled in one place (like vLLM's engine core or
// Triton's core): frostd, the benchmarks and the tools start one from plain core options and drain it; the
// server keeps only the transport (docs/architecture.md, "Start-up, health and the state directory").
//
//   start()   the process's threads (threads) and CPU kernels (kernels), the model (model_path as dtype,
//             or the given `model`), the executor for `device` (on a device the weights are laid out once
//             and shared with the hidden-state source Predict reads), Engine::create with `engine`, a
//             warm-up generation, and the "<log_name>: serving ... ready in" line. Errors name the config
//             field as frostd's config does: `model.path "...": ...`, `model.kernels: ...`,
//             `model.device: ...`.
//   drain()   the engine stops accepting, waits up to the timeout for its requests, then shuts down (every
//             remaining request ends CANCELLED). stop() is drain(0). Both idempotent.
//
// Includes nothing of the server or gRPC: the server builds ServingOptions from its config and passes its
// hooks (on_device_failure) and the registry's slots (kv_repair, kv_splice) through `engine`.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/common/device_spec.h"
#include "core/generate/engine.h"
#include "core/model/model_loader.h"

namespace frost::serving {

struct ServingOptions {
  // The model: a checkpoint directory or "builtin:<name>" (model.path), loaded with `dtype` (model.dtype).
  std::string model_path;
  WeightDtype dtype = WeightDtype::kF32;
  // Or a model the caller loaded already (the benchmarks time the load themselves): used as it is, without
  // a hidden-state source; model_path and dtype are then ignored.
  std::shared_ptr<const LoadedModel> model;
  // Intra-op CPU threads (model.threads; 0 = all cores); nullopt leaves the process's setting.
  std::optional<int32_t> threads = 0;
  // CPU kernels (model.kernels): "auto", "avx512", "avx2" or "scalar"; "" leaves the active choice.
  std::string kernels = "auto";
  // Where the steps run (model.device): "cpu", "cuda[:N]" or "reference"; model.cuda_graphs.
  std::string device = "cpu";
  bool cuda_graphs = true;
  // On a device, give the loaded model a hidden-state source of its own on that device (Predict's and the
  // jobs' backbone features: core/exec/hidden_states.h). Only with model_path.
  bool hidden_source = true;
  // The engine: its options, generator config (default KV codec, which the executor stores too), limits,
  // and the caller's hooks and slots (kv_repair, kv_splice, kv_events, on_device_failure).
  EngineConfig engine;
  // One short greedy generation through the engine before start() returns (allocates the KV cache and
  // scratch, touches every weight, starts the thread pools).
  bool warmup = true;
  // The prefix of the ready and drain log lines ("frostd"); "" logs none of them.
  std::string log_name = "frostd";

  // For a program that set up the process and loaded `model` itself (the benchmarks): the process's threads
  // and kernels left as they are, no warm-up, no log lines; the engine and device still to choose.
  static ServingOptions for_loaded(std::shared_ptr<const LoadedModel> model);
};

class Serving {
 public:
  static absl::StatusOr<std::unique_ptr<Serving>> start(const ServingOptions& options);
  ~Serving();  // stop()
  Serving(const Serving&) = delete;
  Serving& operator=(const Serving&) = delete;

  const std::shared_ptr<const LoadedModel>& model() const { return model_; }
  const std::shared_ptr<Engine>& engine() const { return engine_; }
  // The ready line's figures: seconds from the start of the load to the end of the warm-up, and the bytes
  // of the served weights (ExecutorStats::weight_bytes).
  double ready_s() const { return ready_s_; }
  int64_t weight_bytes() const { return weight_bytes_; }

  // Stops accepting, waits up to timeout_s for the running and waiting requests, then shuts the engine down.
  // Returns whether every request finished within the timeout. Idempotent (later calls return true).
  bool drain(double timeout_s);
  void stop() { (void)drain(0); }

 private:
  Serving() = default;
  ServingOptions options_;
  std::shared_ptr<const LoadedModel> model_;
  std::shared_ptr<Engine> engine_;
  double ready_s_ = 0;
  int64_t weight_bytes_ = 0;
  bool stopped_ = false;
};

}  // namespace frost::serving
