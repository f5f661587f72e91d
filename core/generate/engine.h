#pragma once
// Engine: owns the serving sequences. One worker thread runs every model forward pass
// (llama.cpp's server_context, vLLM's EngineCore); callers only submit and cancel.
//
// Each round the worker admits waiting requests while fewer than max_running are active,
// then runs one step (one forward pass + sampling, see Sequence) for every active sequence,
// round-robin. No batching yet: sequences are interleaved, not fused.
//
// Admission control: at most max_running active plus max_waiting queued requests; submit()
// beyond that fails at once with RESOURCE_EXHAUSTED. Each active sequence owns a KV cache of
// max_context positions, allocated on admission and freed the moment it finishes, is
// cancelled or hits its deadline (at most one more token is computed after a cancel).
//
// Threading: submit(), stats(), stop_accepting(), wait_idle() and shutdown() are thread-safe.
// TokenSink callbacks run on the worker thread and must not block.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/common/cancel.h"
#include "core/generate/generator.h"
#include "core/generate/request.h"
#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"

namespace frost {

// Receives one request's stream. Called on the engine thread; must not block.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  virtual void on_token(const TokenEvent& ev) = 0;
  // Exactly once per accepted request: the result (any finish reason) or an internal error.
  virtual void on_finish(absl::StatusOr<GenerationResult> result) = 0;
};

struct EngineConfig {
  GeneratorConfig gen;       // KV codec, context length, fast path, request limits
  int32_t max_running = 4;   // sequences decoding concurrently
  int32_t max_waiting = 16;  // bounded admission queue
  // The active KV repair operator (owned by the caller, outlives the engine); null = never repair.
  RepairSlot* kv_repair = nullptr;
  // The active KVSplice (owned by the caller, outlives the engine) that sequences with the kvsplice codec
  // store their KV with; null or empty = kvsplice requests fail FAILED_PRECONDITION at submit. A sequence
  // keeps the Active it started with (hot swap safe). With gen.kv_codec = kvsplice the default codec
  // needs it too; kv_bytes_per_token then follows the active set (0 while none is active).
  KvSpliceSlot* kv_splice = nullptr;
};

struct EngineStats {
  int32_t n_running = 0;
  int32_t n_waiting = 0;
  int64_t kv_bytes_in_use = 0;     // KV caches of the active sequences (allocated)
  int64_t kv_bytes_per_token = 0;  // all layers, one position, default codec (kvsplice: of the active
                                   // set, 0 while none is active)
  uint64_t n_accepted = 0;
  uint64_t n_rejected_full = 0;  // RESOURCE_EXHAUSTED at submit
  uint64_t n_finished = 0;
  uint64_t n_repaired = 0;                            // finished sequences that ran with a KV repair operator
  std::map<std::string, uint64_t> finished_by_codec;  // finished sequences per KV codec
  std::string kv_codec;                               // the default codec
  std::string kv_repair_active;                       // name of the active operator ("" = none)
  std::string kv_repair_codec;                        // the codec it repairs
  uint64_t n_spliced = 0;        // finished sequences stored with a KVSplice (kvsplice codec)
  std::string kv_splice_active;  // name of the active KVSplice ("" = none)
  std::string kv_splice_rank;    // its latent ranks: "16", or "12/20" when K and V differ
};

class Engine {
 public:
  // `model` is shared read-only; the engine keeps it alive. Starts the worker thread.
  static absl::StatusOr<std::unique_ptr<Engine>> create(std::shared_ptr<const LoadedModel> model,
                                                        const EngineConfig& cfg);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and tokenizes on the calling thread (INVALID_ARGUMENT / FAILED_PRECONDITION
  // naming the field), then queues. RESOURCE_EXHAUSTED when running + waiting are at their
  // caps; UNAVAILABLE once stop_accepting() or shutdown() was called. When OK is returned,
  // sink->on_finish() is called exactly once. Cancel through `cancel` (any thread).
  absl::Status submit(const GenerationRequest& req, std::shared_ptr<TokenSink> sink,
                      std::shared_ptr<CancelToken> cancel);

  EngineStats stats() const;
  const LoadedModel& model() const { return *model_; }
  int64_t max_context() const { return validator_.max_context(); }

  // New submits fail with UNAVAILABLE; queued and running requests continue (drain).
  void stop_accepting();
  // Blocks until nothing is running or waiting, or `timeout_s` passes. True when idle.
  bool wait_idle(double timeout_s) const;
  // Stops accepting, cancels everything still queued or running (their sinks receive a
  // CANCELLED result), joins the worker. Idempotent.
  void shutdown();

 private:
  struct Pending;
  struct Active;
  Engine(std::shared_ptr<const LoadedModel> model, const EngineConfig& cfg);
  void run();
  void admit_locked(std::vector<std::unique_ptr<Pending>>& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<const LoadedModel> model_;
  EngineConfig cfg_;
  Generator validator_;  // prepare() only: validation + tokenization,
                         // thread-safe (const)

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  int32_t n_running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kv_bytes_in_use_ ABSL_GUARDED_BY(mu_) = 0;  // sum of the active sequences' KV caches
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  EngineStats counters_ ABSL_GUARDED_BY(mu_);
  std::thread worker_;
};

}  // namespace frost
