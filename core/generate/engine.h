#pragma once
// Engine: the serving loop (llama.cpp's server_context, vLLM's EngineCore). One worker thread owns the
// executor's steps, the KV block books and every running sequence; callers only submit and cancel.
//
// Continuous batching on a paged KV cache. Each round, five named phases of the engine thread (engine.cc:
// run() calls them in turn):
//   intake     requests submitted since the last round join the scheduler's queue; cancellations and
//              deadlines end their requests (running or waiting) within this round.
//   schedule   core/generate/scheduler.h decides the step: every decoding sequence's next token, prompt
//              chunks within engine.max_batch_tokens (chunked prefill), admissions while fewer than
//              max_running run and the block books allow, preemption of the newest sequence when blocks
//              run out (recomputed later; never failed), prefix-cache adoption at admission.
//   execute    the step's executor (core/exec/step_executor.h: the CPU's batched forward, or a device) runs
//              it: every weight matrix read once per step, attention per sequence through its own codec;
//              newly full blocks are published to the prefix cache. A failed step ends its requests.
//   update     every sequence that got logits gets its token — sampled by the device where the executor
//              does that and the request allows it, else by the host sampler (in parallel; a constrained
//              sequence's grammar mask is filled there) — and streams it; sequences that are done end
//              (their blocks go back at once).
//   end_round  the step's counters and the gauges are published; the round's events go to the delivery
//              thread.
// Request preparation (validation, tokenization, a constraint's cached compile) runs on the caller's thread
// in submit() (prepare_request()); structured output's vocabulary and compile cache: engine_constraints.h.
// A sequence's logits never depend on what shares its step (kernels/cpu/gemm.h, core/kv/attend.h), so a
// request's output is the same at any load, chunking or preemption — and the same as Generator's.
//
// KV memory is a pool of fixed-size blocks: the books (core/kv/block_books.h) are the engine's, the storage
// (core/kv/block_storage.h) the executor's — host pages, where a block holds kv_block_tokens positions at fp32
// and proportionally more with a compact codec, or device pages in the device's layout. A request whose
// prompt + max_new_tokens could never fit the pool is refused at submit (INVALID_ARGUMENT naming the limit),
// and so is one the executor cannot run (a KV codec, repair operator or KVSplice the device lacks).
//
// Admission control: at most max_running running plus max_waiting queued requests; submit() beyond that
// fails at once with RESOURCE_EXHAUSTED. Cancellation and deadlines are polled every round, for running and
// waiting requests alike (a cancelled request stops within one step; its blocks are freed before on_finish).
//
// Streaming happens off the engine thread: each round's token events and results are handed, in one batch, to
// a delivery thread that calls the TokenSinks (in order per request; on_finish last), so the callbacks into a
// busy gRPC transport overlap the next step instead of delaying it, and the engine wakes the delivery thread
// once per round. The engine runs at most one round ahead of delivery (it waits for the round before last to
// be delivered before it starts a step), so a client's cancel is seen within two rounds and a starved
// delivery thread slows the engine down instead of piling up tokens.
//
// Threading: submit(), stats(), stop_accepting(), wait_idle() and shutdown() are thread-safe.
// TokenSink callbacks run on the engine's delivery thread and must not block.
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/common/cancel.h"
#include "core/exec/step_executor.h"
#include "core/generate/drafter.h"
#include "core/generate/engine_constraints.h"
#include "core/generate/engine_masks.h"
#include "core/generate/engine_options.h"
#include "core/generate/generator.h"
#include "core/generate/request.h"
#include "core/generate/scheduler.h"
#include "core/kv/block_books.h"
#include "core/kv/kv_events.h"
#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"

namespace frost {

// Receives one request's stream. Called on the engine's delivery thread, in order; must not block.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // Once, before any token, when the request joins the scheduler's queue: at once for most requests (inside
  // submit()), and after its constraint compiled for a request whose constraint was not cached. A request
  // whose constraint is refused by the compiler gets on_finish(error) without on_admitted() — a transport
  // reports that as a refusal of the request (INVALID_ARGUMENT naming the constraint field), not as a failure
  // of a generation that started. May run on the caller's thread or a compiler thread; must not block.
  virtual void on_admitted() {}
  virtual void on_token(const TokenEvent& ev) = 0;
  // Exactly once per accepted request: the result (any finish reason) or an error.
  virtual void on_finish(absl::StatusOr<GenerationResult> result) = 0;
};

// The sizing knobs (max_running … prefix_caching) are the EngineOptions base (engine_options.h).
struct EngineConfig : EngineOptions {
  GeneratorConfig gen;  // default KV codec, context length, request limits (gen.fast_decode unused)
  // Debug: check the block books after every step (FROST_CHECK: crash loudly on a leak or double free).
  bool audit_kv = false;
  // Sliding windows (a model whose every layer slides, KvSpec::window): give back the blocks below each
  // sequence's window (on: vLLM's and llama.cpp's behaviour). Off keeps every block, as for a global model: the
  // outputs are the same, only the memory held differs (the tests compare the two).
  bool kv_release_window = true;
  // The active KV repair operator (owned by the caller, outlives the engine); null = never repair.
  RepairSlot* kv_repair = nullptr;
  // The active KVSplice (owned by the caller, outlives the engine) that sequences with the kvsplice codec
  // store their KV with; null or empty = kvsplice requests fail FAILED_PRECONDITION at submit. A sequence
  // keeps the Active it started with (hot swap safe). With gen.kv_codec = kvsplice the default codec
  // needs it too; kv_bytes_per_token then follows the active set (0 while none is active).
  KvSpliceSlot* kv_splice = nullptr;
  // Called once, on the engine thread, when the executor reports a sticky device error (health() not OK):
  // the engine then fails every request with UNAVAILABLE and refuses new ones; the server turns readiness
  // NOT_SERVING. Must not block.
  std::function<void(const absl::Status&)> on_device_failure;
  // Where the prefix cache's block events go (core/kv/kv_events.h; owned by the caller, outlives the engine):
  // one batch per round that changed what the cache holds, from end_round. Null = no events are recorded.
  KvEventSink* kv_events = nullptr;
  // Constrained decoding: compute the masks of the constrained rows the host samples on a thread of their own
  // while the step runs (core/generate/engine_masks.h). Off: sample() computes them lazily after the step
  // (the naive twin; the outputs are the same).
  bool overlap_masks = true;
  // Constrained decoding: a masked row with few allowed tokens is sampled over those alone (Sampler::
  // set_sparse_masks, core/generate/sampler.cc sample_sparse). Off: the dense reference over the whole masked
  // row (the naive twin; the same tokens).
  bool sparse_masks = true;
};

// A cumulative histogram snapshot (Prometheus semantics): counts[i] observations <= bounds[i], plus the
// total count and sum (+Inf bucket = count).
struct EngineHistogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  uint64_t count = 0;
  double sum = 0;
  void observe(double v);
};

struct EngineStats {
  int32_t n_running = 0;
  int32_t n_waiting = 0;           // queued for admission, preempted ones included
  int32_t max_running = 0;         // the capacity they are measured against (EngineConfig)
  int32_t max_waiting = 0;
  int64_t kv_bytes_in_use = 0;     // blocks held by running sequences × block bytes
  int64_t kv_bytes_needed = 0;     // what their positions occupy without block rounding (Σ positions held × bytes
                                   // per position of each sequence's codec; a shared prefix counts per sequence;
                                   // a sliding window's released positions are not held)
  int64_t kv_bytes_per_token = 0;  // all layers, one position, default codec (kvsplice: of the active
                                   // set, 0 while none is active)
  // The block pool.
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0, kv_blocks_free = 0;
  int64_t kv_block_bytes = 0;   // bytes per block
  int64_t kv_block_tokens = 0;  // positions per block at fp32 (engine.kv_block_tokens)
  int64_t kv_block_positions = 0;  // positions per block with the default codec (kvsplice: kv_block_tokens)
  int64_t kv_pool_bytes = 0;    // blocks × bytes
  ExecutorStats executor;       // the device that runs the steps (core/exec/step_executor.h)
  uint64_t prefix_queries_tokens = 0;  // tokens looked up in the prefix cache at admission
  uint64_t prefix_hits_tokens = 0;     // of those, found cached (whole blocks reused)
  uint64_t n_preemptions = 0;
  uint64_t n_steps = 0;
  // Engine-thread seconds per phase of a step, cumulative: scheduling, the executor's step (forward pass, and
  // sampling where the device samples), host sampling, streaming (TokenSink callbacks, finishing requests).
  double t_schedule_s = 0, t_forward_s = 0, t_sample_s = 0, t_emit_s = 0;
  double t_draft_s = 0;    // speculative decoding's drafting (drafters, grammar walks) before the schedule
  double t_deliver_s = 0;  // delivery-thread seconds in TokenSink callbacks
  EngineHistogram batch_size;    // sequences per step
  EngineHistogram batch_tokens;  // tokens per step
  ConstraintCompilerStats constraints;  // structured output: compiles, refusals, the compile cache
  uint64_t n_accepted = 0;
  uint64_t n_rejected_full = 0;  // RESOURCE_EXHAUSTED at submit
  uint64_t n_finished = 0;
  uint64_t n_repaired = 0;                            // finished sequences that ran with a KV repair operator
  std::map<std::string, uint64_t> finished_by_codec;  // finished sequences per KV codec
  std::string kv_codec;                               // the default codec
  std::string kv_repair_active;                       // name of the active operator ("" = none)
  std::string kv_repair_codec;                        // the codec it repairs
  // Speculative decoding (core/generate/speculation.h), vLLM's spec_decode counters: a draft is one sequence's
  // drafted tokens verified in one step; accepted_per_pos[i] counts the drafts whose token i was accepted (so
  // it sums to accepted_tokens and never exceeds drafts). forced_tokens: drafted by jump-forward (the grammar
  // allowed exactly one token), a subset of draft_tokens.
  uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0, spec_forced_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
  uint64_t n_spliced = 0;        // finished sequences stored with a KVSplice (kvsplice codec)
  std::string kv_splice_active;  // name of the active KVSplice ("" = none)
  std::string kv_splice_rank;    // its latent ranks: "16", or "12/20" when K and V differ
};

class Engine {
 public:
  // `model` is shared read-only; the engine keeps it alive. `executor` runs the steps (null: a CpuExecutor of
  // `model`); the engine owns it. Sizes and allocates the KV pool, starts the worker.
  // INVALID_ARGUMENT naming the field for a bad config; RESOURCE_EXHAUSTED when the pool cannot be reserved.
  static absl::StatusOr<std::unique_ptr<Engine>> create(std::shared_ptr<const LoadedModel> model,
                                                        const EngineConfig& cfg,
                                                        std::unique_ptr<StepExecutor> executor = nullptr);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and tokenizes on the calling thread (INVALID_ARGUMENT / FAILED_PRECONDITION naming the
  // field), then queues. Tokenizing a long prompt takes milliseconds: call it from a worker (frostd: the
  // Generation service's intake executor), never from a gRPC callback thread or the engine thread.
  // RESOURCE_EXHAUSTED when running + waiting are at their caps; UNAVAILABLE once stop_accepting() or
  // shutdown() was called. When OK is returned, sink->on_finish() is called exactly once. Cancel through
  // `cancel` (any thread).
  // A constraint is never compiled here: a cached one (or its cached refusal, returned as the error) is used
  // at once, any other is compiled on the engine's ConstraintCompiler (constraint_compiler.h: bounded
  // threads, a time budget, cancelled with the request) and the request joins the queue when it is ready —
  // or ends with on_finish(error) ("constraint: ...") without on_admitted() when it is refused.
  absl::Status submit(const GenerationRequest& req, std::shared_ptr<TokenSink> sink,
                      std::shared_ptr<CancelToken> cancel);

  EngineStats stats() const;
  const LoadedModel& model() const { return *model_; }
  // The device that runs the steps ("cpu", "cuda:0", "reference").
  std::string device() const { return exec_->device(); }
  int64_t max_context() const { return validator_.max_context(); }

  // New submits fail with UNAVAILABLE; queued and running requests continue (drain).
  void stop_accepting();
  // Blocks until nothing is running or waiting, or `timeout_s` passes. True when idle.
  bool wait_idle(double timeout_s) const;
  // Stops accepting, cancels everything still queued or running (their sinks receive a
  // CANCELLED result), joins the worker. Idempotent.
  void shutdown();

 private:
  friend struct EngineRequest;
  struct Pending;
  struct Delivery;
  struct Loop;
  Engine(std::shared_ptr<const LoadedModel> model, const EngineConfig& cfg);
  // submit()'s request preparation (caller's thread): everything before admission; a request ready to queue.
  absl::StatusOr<std::unique_ptr<Pending>> prepare_request(const GenerationRequest& req,
                                                           std::shared_ptr<TokenSink> sink,
                                                           std::shared_ptr<CancelToken> cancel);
  void run();  // the engine thread: intake → schedule → execute → update → end_round, each round
  // The named steps of a round (engine.cc), on the engine thread's state.
  bool intake(Loop& loop);  // false: stop
  Scheduler::Step schedule(Loop& loop);
  bool execute(Loop& loop, const Scheduler::Step& step);  // false: the step failed (its requests ended)
  void update(Loop& loop, const Scheduler::Step& step, const ExecResult& res);
  // Speculative decoding's parts of a round (engine_spec.cc): the drafts before schedule(); after
  // verification, the rejected rows' KV truncated and the counters.
  void draft(Loop& loop);  // timed (t_draft_s) around draft_round()
  void draft_round(Loop& loop);
  void rewind_rejected(Loop& loop);
  absl::Status resolve_spec(const GenerationRequest& req, Pending* p) const;
  void start_spec(EngineRequest& a) const;
  void end_round(Loop& loop, const Scheduler::Step& step);
  void flush_kv_events();
  void finish(Loop& loop, EngineRequest& a, absl::StatusOr<GenerationResult> r);  // ends a request
  void shut_down(Loop& loop);
  std::function<std::unique_ptr<SequenceKv>()> make_kv(EngineRequest* a);
  void deliver();  // the delivery thread
  void hand_over(std::vector<Delivery>& batch);
  void publish_stats(uint64_t preemptions, uint64_t queries, uint64_t hits, int32_t n_running, int32_t n_waiting,
                     int64_t bytes_needed);

  // A compile of submit() came back (a compiler thread): queue the request, or end it.
  void compiled(std::unique_ptr<Pending> p, ConstraintCompiler::Result r);
  // Hands a request that never reached the engine thread its outcome (through the delivery thread).
  void end_unadmitted(std::unique_ptr<Pending> p, absl::StatusOr<GenerationResult> r);

  std::shared_ptr<const LoadedModel> model_;
  EngineConfig cfg_;
  // Structured output (submit(), any thread): the vocabulary and the compile cache (engine_constraints.h).
  std::unique_ptr<EngineConstraints> constraints_;
  Generator validator_;  // prepare() only: validation + tokenization, thread-safe (const)
  std::unique_ptr<StepExecutor> exec_;  // engine thread only after create() (stats(), health(): any thread)
  const KvBlockStorage* storage_ = nullptr;  // the executor's pool storage
  std::unique_ptr<KvBlockBooks> books_;      // engine thread only after create()
  KvEventBuffer kv_events_;  // this round's events of the books (engine thread; cfg_.kv_events)
  uint64_t model_salt_ = 0;            // prefix-cache key of the model (name, dtype)
  // Speculative decoding's shared suffix cache (outputs of finished requests that drafted with suffix
  // decoding; filled on the delivery thread, read by the drafters on the engine thread). Null when
  // engine.speculative.suffix_cache_tokens is 0.
  std::unique_ptr<SuffixCache> suffix_cache_;
  // Constrained masks filled while the step runs (engine thread; null when cfg_.overlap_masks is off).
  std::unique_ptr<MaskFiller> masks_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  int64_t n_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // accepted, not yet finished
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status device_error_ ABSL_GUARDED_BY(mu_);  // the executor's sticky error, once seen
  EngineStats counters_ ABSL_GUARDED_BY(mu_);
  std::thread worker_;

  absl::Mutex dmu_;
  std::deque<Delivery> deliveries_ ABSL_GUARDED_BY(dmu_);
  bool delivery_stop_ ABSL_GUARDED_BY(dmu_) = false;
  uint64_t handed_ ABSL_GUARDED_BY(dmu_) = 0;     // rounds handed to the delivery thread
  uint64_t delivered_ ABSL_GUARDED_BY(dmu_) = 0;  // rounds it has finished delivering
  std::atomic<bool> stopping_{false};             // shutdown() was called (read by the engine's waits)
  std::thread deliverer_;
};

}  // namespace frost
