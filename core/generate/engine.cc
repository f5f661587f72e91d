#include "core/generate/engine.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <pthread.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/common/check.h"
#include "core/common/field_error.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/exec/cpu_executor.h"
#include "core/generate/engine_internal.h"
#include "core/generate/scheduler.h"
#include "core/generate/sequence.h"
#include "kernels/cpu/parallel.h"

namespace frost {

void EngineHistogram::observe(double v) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) ++counts[i];
  ++count;
  sum += v;
}

namespace {

EngineHistogram powers_of_two(int max_exp) {
  EngineHistogram h;
  for (int e = 0; e <= max_exp; ++e) h.bounds.push_back(static_cast<double>(int64_t{1} << e));
  h.counts.assign(h.bounds.size(), 0);
  return h;
}

}  // namespace

Engine::Engine(std::shared_ptr<const LoadedModel> model, const EngineConfig& cfg)
    : model_(std::move(model)), cfg_(cfg), validator_(*model_, cfg.gen) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const LoadedModel> model,
                                                       const EngineConfig& cfg,
                                                       std::unique_ptr<StepExecutor> executor) {
  if (!model || !model->model) return absl::InvalidArgumentError("engine: no model");
  // The one check of the engine's ranges, the same the server's config validation makes
  // (core/generate/engine_options.h).
  FROST_RETURN_IF_ERROR(check_engine_options(cfg));
  std::unique_ptr<Engine> e(new Engine(model, cfg));
  e->constraints_ = std::make_unique<EngineConstraints>(model, cfg);
  e->exec_ = executor ? std::move(executor) : std::make_unique<CpuExecutor>(model);
  StepExecutor& ex = *e->exec_;
  // The engine's default codec must be one the executor stores (a device stores one format).
  if (absl::Status st = ex.check_request(cfg.gen.kv_codec, false); !st.ok())
    return absl::Status(st.code(), absl::StrCat("engine.kv_codec: ", st.message()));
  const Transformer& tf = *e->model_->model;
  int64_t block_bytes = 0, per_token = 0;
  FROST_RETURN_IF_ERROR(torch_call([&] { block_bytes = ex.kv_block_bytes(cfg.kv_block_tokens); }));
  const int64_t full_context = kv_blocks_bound(e->validator_.max_context(), cfg.kv_block_tokens,
                                               cfg.kv_release_window ? tf.kv_spec(1, KvCodecKind::kF32).window : 0,
                                               cfg.max_batch_tokens);
  const int64_t pool_bytes = cfg.kv_cache_bytes > 0
                                 ? cfg.kv_cache_bytes
                                 : ex.default_kv_pool_bytes(full_context * block_bytes, cfg.max_running);
  const int64_t n_blocks = pool_bytes / block_bytes;
  if (n_blocks < 1)
    return absl::InvalidArgumentError(absl::StrCat("engine.kv_cache_bytes = ", pool_bytes,
                                                   " is less than one KV block (", block_bytes, " bytes: ",
                                                   cfg.kv_block_tokens, " positions of ", tf.config().n_layer,
                                                   " layers on ", ex.device(), ")"));
  StepExecutor::Plan plan;
  plan.n_blocks = n_blocks;
  plan.block_tokens = cfg.kv_block_tokens;
  plan.prefault = cfg.kv_cache_prefault;
  plan.max_rows = cfg.max_batch_tokens;
  plan.max_seqs = cfg.max_running;
  FROST_RETURN_IF_ERROR(ex.allocate_kv(plan));
  e->storage_ = &ex.kv_storage();
  e->books_ = std::make_unique<KvBlockBooks>(e->storage_->n_blocks(), e->storage_->block_bytes());
  if (cfg.kv_events) e->books_->set_observer(&e->kv_events_);
  if (n_blocks < full_context)
    FROST_LOG_WARN("engine: the KV pool (%lld blocks) cannot hold one sequence of the full context (%lld "
                   "blocks); longer requests are refused at submit",
                   static_cast<long long>(n_blocks), static_cast<long long>(full_context));
  // kvsplice as the default codec: the bytes depend on the active set's rank, so stats() computes them at
  // read time (KvSpliceSet::bytes_per_token; 0 while none is active).
  int64_t positions = cfg.kv_block_tokens;
  if (cfg.gen.kv_codec != KvCodecKind::kKvSplice) {
    FROST_RETURN_IF_ERROR(torch_call([&] {
      const KvLayout layout = e->storage_->layout(tf.kv_spec(1, cfg.gen.kv_codec));
      per_token = layout.bytes_per_token();
      positions = layout.block_tokens;
    }));
  }
  e->model_salt_ = kv_salt_mix(kv_salt_mix(0, e->model_->name), weight_dtype_name(tf.weight_format()));
  if (cfg.overlap_masks) e->masks_ = std::make_unique<MaskFiller>();
  if (cfg.speculative.suffix_cache_tokens > 0)
    e->suffix_cache_ = std::make_unique<SuffixCache>(kSuffixDepth, static_cast<size_t>(cfg.speculative.suffix_cache_tokens));
  {
    absl::MutexLock lock(&e->mu_);
    EngineStats& s = e->counters_;
    s.kv_bytes_per_token = per_token;
    s.kv_codec = kv_codec_name(cfg.gen.kv_codec);
    s.kv_blocks_total = s.kv_blocks_free = n_blocks;
    s.kv_block_bytes = block_bytes;
    s.kv_block_tokens = cfg.kv_block_tokens;
    s.kv_block_positions = positions;
    s.kv_pool_bytes = n_blocks * block_bytes;
    s.max_running = cfg.max_running;
    s.max_waiting = cfg.max_waiting;
    s.batch_size = powers_of_two(9);     // 1 .. 512 sequences
    s.batch_tokens = powers_of_two(13);  // 1 .. 8192 tokens
  }
  FROST_LOG_INFO("engine: on %s, KV pool %lld blocks × %lld bytes in %s (%.1f MiB; %lld positions per block at "
                 "%s), max_running %d, max_batch_tokens %lld, prefix caching %s",
                 ex.device().c_str(), static_cast<long long>(n_blocks), static_cast<long long>(block_bytes),
                 e->storage_->where().c_str(), static_cast<double>(n_blocks * block_bytes) / (1 << 20),
                 static_cast<long long>(cfg.kv_block_tokens), ex.device() == "cpu" ? "fp32" : "the device's format",
                 cfg.max_running, static_cast<long long>(cfg.max_batch_tokens), cfg.prefix_caching ? "on" : "off");
  e->deliverer_ = std::thread([raw = e.get()] { raw->deliver(); });
  e->worker_ = std::thread([raw = e.get()] { raw->run(); });
  return e;
}

Engine::~Engine() { shutdown(); }

// Request preparation, on the caller's thread and before any model work: validation and tokenization, the
// sampling parameters and KV options, the constraint's vocabulary and cached compile (or cached refusal),
// what the executor can run, and whether the KV pool could ever hold the request. The result is a request
// ready to queue: only admission (the caps) and, for a constraint the cache does not hold, its compile
// remain (submit()).
absl::StatusOr<std::unique_ptr<Engine::Pending>> Engine::prepare_request(
    const GenerationRequest& req, std::shared_ptr<TokenSink> sink, std::shared_ptr<CancelToken> cancel) {
  if (!sink || !cancel) return absl::InvalidArgumentError("engine: submit needs a sink and a cancel token");
  absl::StatusOr<std::vector<int32_t>> prompt = validator_.prepare(req);
  if (!prompt.ok()) return prompt.status();
  auto p = std::make_unique<Pending>();
  p->prompt = std::move(prompt).value();
  p->params = req.params;
  p->codec = req.kv_codec.value_or(cfg_.gen.kv_codec);
  p->repair_mode = req.kv_repair;
  FROST_RETURN_IF_ERROR(resolve_spec(req, p.get()));
  if (req.constraint.kind != constrain::ConstraintSpec::Kind::kNone) {
    // A cached outcome is used (or refused) here and now; anything else compiles after admission (submit()).
    absl::StatusOr<EngineConstraints::Lookup> found = constraints_->lookup(req.constraint);
    if (!found.ok()) return found.status();
    p->vocab = std::move(found->vocab);
    p->constraint = std::move(found->compiled);
  }
  // What the executor cannot run (a device stores one KV format and has no repair operators or KVSplice).
  FROST_RETURN_IF_ERROR(exec_->check_request(p->codec, req.kv_repair == GenerationRequest::KvRepair::kOn));
  if (p->codec == KvCodecKind::kKvSplice) {
    p->splice = cfg_.kv_splice ? cfg_.kv_splice->get() : nullptr;
    if (!p->splice || !p->splice->set) {
      return prefix_field(
          absl::FailedPreconditionError(
              "kvsplice but no KVSplice is active (train a kvsplice job and activate it, or set "
              "engine.kv_splice)"),
          "kv.codec");
    }
  }
  if (req.kv_repair == GenerationRequest::KvRepair::kOn) {
    std::shared_ptr<const RepairSlot::Active> r = cfg_.kv_repair ? cfg_.kv_repair->get() : nullptr;
    if (!r) {
      return prefix_field(
          absl::FailedPreconditionError(
              "ON but no KV repair operator is active (train a kv_repair job and activate it, or "
              "set engine.kv_repair)"),
          "kv.repair");
    }
    if (r->codec != p->codec) {
      return prefix_field(
          absl::FailedPreconditionError(
              absl::StrCat("ON but the active operator ", r->name, " repairs the ", kv_codec_name(r->codec),
                           " codec and this request stores its KV as ", kv_codec_name(p->codec))),
          "kv.repair");
    }
    if (!model_->config.variants.sba_layers.empty())
      return prefix_field(
          absl::FailedPreconditionError(
              "ON but this model has symmetric bidirectional attention (SBA) layers, which keep "
              "two KV stores per layer; repair operators act on one"),
          "kv.repair");
  }
  // A request the pool could never hold, even alone, is refused now rather than stalling the queue.
  const int64_t need = static_cast<int64_t>(p->prompt.size()) + req.params.max_new_tokens;
  int64_t per_block = 0, window = 0;
  FROST_RETURN_IF_ERROR(torch_call([&] {
    KvSpec spec = model_->model->kv_spec(validator_.max_context(), p->codec, p->splice ? p->splice->set : nullptr);
    per_block = storage_->layout(spec).block_tokens;
    window = cfg_.kv_release_window ? spec.window : 0;
  }));
  // A sliding model (every layer slides) holds only its window's blocks and the chunk being prefilled.
  const int64_t blocks =
      per_block > 0 ? kv_blocks_bound(need, per_block, window, cfg_.max_batch_tokens) : storage_->n_blocks() + 1;
  if (blocks > storage_->n_blocks()) {
    const std::string msg = absl::StrCat(
        "prompt tokens (", p->prompt.size(), ") + max_new_tokens (", req.params.max_new_tokens, ") = ", need,
        " tokens need ", blocks, " KV blocks of ", per_block, " positions (codec ", kv_codec_name(p->codec),
        ") but the KV pool holds ", storage_->n_blocks(),
        " blocks (engine.kv_cache_bytes = ", storage_->n_blocks() * storage_->block_bytes(), ")");
    return with_field(absl::InvalidArgumentError(msg), {"prompt", "", msg});
  }
  p->sink = std::move(sink);
  p->cancel = std::move(cancel);
  p->t_submit_ns = RealClock::get().now_ns();
  p->n_prompt_given = static_cast<int32_t>(p->prompt.size());
  return p;
}

absl::Status Engine::submit(const GenerationRequest& req, std::shared_ptr<TokenSink> sink,
                            std::shared_ptr<CancelToken> cancel) {
  absl::StatusOr<std::unique_ptr<Pending>> prepared =
      prepare_request(req, std::move(sink), std::move(cancel));
  if (!prepared.ok()) return prepared.status();
  std::unique_ptr<Pending> p = *std::move(prepared);
  // Constrained, and the compile cache does not hold the spec.
  const bool compile = req.constraint.kind != constrain::ConstraintSpec::Kind::kNone && !p->constraint;
  {  // admission
    absl::MutexLock lock(&mu_);
    if (!device_error_.ok())
      return absl::UnavailableError(absl::StrCat("the engine's device failed: ", device_error_.message()));
    if (!accepting_) return absl::UnavailableError("server is shutting down: not accepting new requests");
    if (n_in_flight_ >= static_cast<int64_t>(cfg_.max_running) + cfg_.max_waiting) {
      ++counters_.n_rejected_full;
      return absl::ResourceExhaustedError(absl::StrCat("server busy: ", counters_.n_running, " running and ",
                                                       n_in_flight_ - counters_.n_running,
                                                       " waiting requests (limits ", cfg_.max_running, " + ",
                                                       cfg_.max_waiting, ")"));
    }
    ++counters_.n_accepted;
    ++n_in_flight_;
    if (!compile) {
      p->sink->on_admitted();  // before the engine thread can see it (and stream its first token)
      pending_.push_back(std::move(p));
      return absl::OkStatus();
    }
  }
  // The compile: on the compiler's threads, cancelled with the request; compiled() queues it or ends it.
  std::shared_ptr<const CancelToken> cancel_token = p->cancel;
  auto holder = std::make_shared<std::unique_ptr<Pending>>(std::move(p));
  absl::Status st =
      constraints_->compile_async(req.constraint, cancel_token, [this, holder](ConstraintCompiler::Result r) {
        compiled(std::move(*holder), std::move(r));
      });
  if (!st.ok()) {
    absl::MutexLock lock(&mu_);
    --counters_.n_accepted;
    --n_in_flight_;
  }
  return st;
}

void Engine::compiled(std::unique_ptr<Pending> p, ConstraintCompiler::Result r) {
  if (!r.ok()) {
    // The request's own cancel or deadline ends it as one that never started; anything else is a refusal.
    switch (p->cancel->state()) {
      case CancelToken::State::kCancelled:
      case CancelToken::State::kDeadlineExceeded: {
        GenerationResult res;
        res.finish_reason = p->cancel->state() == CancelToken::State::kCancelled ? FinishReason::kCancelled
                                                                                 : FinishReason::kDeadline;
        res.n_prompt = p->n_prompt_given;
        res.prompt_ids = p->prompt;
        return end_unadmitted(std::move(p), std::move(res));
      }
      case CancelToken::State::kRunning:
        break;
    }
    return end_unadmitted(std::move(p), r.status());  // named "constraint: ..." (EngineConstraints)
  }
  p->constraint = *std::move(r);
  {
    absl::MutexLock lock(&mu_);
    if (!stop_) {  // else the engine thread has taken its last intake: end the request here
      p->sink->on_admitted();
      pending_.push_back(std::move(p));
      return;
    }
  }
  GenerationResult res;
  res.finish_reason = FinishReason::kCancelled;
  res.n_prompt = p->n_prompt_given;
  end_unadmitted(std::move(p), std::move(res));
}

void Engine::end_unadmitted(std::unique_ptr<Pending> p, absl::StatusOr<GenerationResult> r) {
  Delivery d;
  d.sink = p->sink;
  d.result = std::move(r);
  d.codec = kv_codec_name(p->codec);
  d.unadmitted = true;
  absl::MutexLock lock(&dmu_);
  deliveries_.push_back(std::move(d));
}

EngineStats Engine::stats() const {
  const ExecutorStats es = exec_->stats();  // thread-safe, outside mu_
  const ConstraintCompilerStats cs = constraints_->stats();
  absl::MutexLock lock(&mu_);
  EngineStats s = counters_;
  s.executor = es;
  s.constraints = cs;
  if (std::shared_ptr<const RepairSlot::Active> r = cfg_.kv_repair ? cfg_.kv_repair->get() : nullptr) {
    s.kv_repair_active = r->name;
    s.kv_repair_codec = kv_codec_name(r->codec);
  }
  std::shared_ptr<const KvSpliceSlot::Active> sp = cfg_.kv_splice ? cfg_.kv_splice->get() : nullptr;
  if (sp && sp->set) {
    s.kv_splice_active = sp->name;
    s.kv_splice_rank = sp->set->ranks().label();
  }
  if (cfg_.gen.kv_codec == KvCodecKind::kKvSplice)
    s.kv_bytes_per_token = sp && sp->set ? sp->set->bytes_per_token() : 0;
  return s;
}

void Engine::stop_accepting() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
}

bool Engine::wait_idle(double timeout_s) const {
  absl::MutexLock lock(&mu_);
  // Idle once every accepted request has finished and the engine thread has published the round that
  // finished them (so stats() read after this shows the idle pool).
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return n_in_flight_ == 0 && counters_.n_running == 0 && counters_.n_waiting == 0;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(timeout_s));
}

void Engine::shutdown() {
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    stop_ = true;
  }
  // Compiles stop first: their requests end (CANCELLED) through the delivery thread, which is still running.
  if (constraints_) constraints_->shutdown();
  stopping_.store(true);
  { absl::MutexLock lock(&dmu_); }  // re-evaluates the engine's wait for delivery
  if (worker_.joinable()) worker_.join();  // it hands its last deliveries over, then stops the deliverer
  if (deliverer_.joinable()) deliverer_.join();
}

void Engine::hand_over(std::vector<Delivery>& batch) {
  absl::MutexLock lock(&dmu_);
  for (Delivery& d : batch) deliveries_.push_back(std::move(d));
  batch.clear();
  ++handed_;
}

void Engine::deliver() {
  pthread_setname_np(pthread_self(), "frost-deliver");
  for (;;) {
    std::deque<Delivery> batch;
    bool stop = false;
    uint64_t rounds = 0;
    {
      absl::MutexLock lock(&dmu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(dmu_) {
        return delivery_stop_ || !deliveries_.empty() || delivered_ < handed_;
      };
      dmu_.Await(absl::Condition(&ready));
      batch.swap(deliveries_);
      stop = delivery_stop_;
      rounds = handed_;
    }
    const int64_t t0 = RealClock::get().now_ns();
    int64_t finished = 0;
    for (Delivery& d : batch) {
      if (d.token) {
        d.sink->on_token(*d.token);
        continue;
      }
      d.sink->on_finish(std::move(*d.result));
      if (!d.suffix_output.empty()) suffix_cache_->insert(d.suffix_output);  // off the engine thread
      ++finished;
      absl::MutexLock lock(&mu_);
      --n_in_flight_;
      if (d.unadmitted) continue;  // never ran: not a finished sequence
      ++counters_.n_finished;
      if (d.repaired) ++counters_.n_repaired;
      if (d.spliced) ++counters_.n_spliced;
      ++counters_.finished_by_codec[d.codec];
    }
    {
      absl::MutexLock lock(&mu_);
      counters_.t_deliver_s += static_cast<double>(RealClock::get().now_ns() - t0) * 1e-9;
    }
    {
      absl::MutexLock lock(&dmu_);
      delivered_ = rounds;
    }
    if (stop && batch.empty()) return;
  }
}

void Engine::publish_stats(uint64_t preemptions, uint64_t queries, uint64_t hits, int32_t n_running,
                           int32_t n_waiting, int64_t bytes_needed) {
  const KvPoolStats ps = books_->stats();
  absl::MutexLock lock(&mu_);
  EngineStats& s = counters_;
  s.n_running = n_running;
  s.n_waiting = n_waiting + static_cast<int32_t>(pending_.size());
  s.kv_blocks_used = ps.n_used;
  s.kv_blocks_cached = ps.n_cached;
  s.kv_blocks_free = ps.n_free;
  s.kv_bytes_in_use = ps.n_used * ps.block_bytes;
  s.kv_bytes_needed = bytes_needed;
  s.n_preemptions = preemptions;
  s.prefix_queries_tokens = queries;
  s.prefix_hits_tokens = hits;
}

// The paged cache of a request, made when it first runs: the codec it asked for, the KVSplice and repair
// operator active at that moment (a later swap does not touch it), and its prefix-cache key.
std::function<std::unique_ptr<SequenceKv>()> Engine::make_kv(EngineRequest* a) {
  return [this, a]() {
    std::shared_ptr<const KvSpliceSet> splice;
    if (a->req->codec == KvCodecKind::kKvSplice) {
      std::shared_ptr<const KvSpliceSlot::Active> sp = cfg_.kv_splice ? cfg_.kv_splice->get() : nullptr;
      if (!sp || !sp->set) sp = a->req->splice;
      a->req->splice.reset();
      splice = sp->set;
      a->kv_splice = sp->name;
    }
    KvSpec spec = model_->model->kv_spec(validator_.max_context(), a->req->codec, splice);
    if (!cfg_.kv_release_window) spec.window = 0;  // every block kept (the model still attends its window)
    auto kv = std::make_unique<SequenceKv>(spec, books_.get(), storage_);
    std::shared_ptr<const RepairSlot::Active> r = cfg_.kv_repair ? cfg_.kv_repair->get() : nullptr;
    if (r && r->codec == a->req->codec && a->req->repair_mode != GenerationRequest::KvRepair::kOff &&
        model_->config.variants.sba_layers.empty() && exec_->runs_kv_repair()) {
      kv->set_repair(r->set);
      a->kv_repair = r->name;
    }
    uint64_t salt = kv_salt_mix(model_salt_, kv_codec_name(a->req->codec));
    salt = kv_salt_mix(kv_salt_mix(salt, a->kv_repair), a->kv_splice);
    kv->set_prefix_salt(kv_salt_mix(salt, std::to_string(kv->block_tokens())));
    return kv;
  };
}

// Ends a request (any outcome): its blocks go back to the pool before the client hears of it.
void Engine::finish(Loop& loop, EngineRequest& a, absl::StatusOr<GenerationResult> r) {
  loop.sched.remove(&a.entry);
  a.entry.kv.reset();
  const int64_t now = RealClock::get().now_ns();
  if (r.ok()) {  // timings from submit: queue (until it first ran), prefill (until its first token)
    const int64_t t_admit = a.t_admit_ns > 0 ? a.t_admit_ns : now;
    r->t_queue_s = static_cast<double>(t_admit - a.req->t_submit_ns) * 1e-9;
    r->t_prefill_s = a.t_first_ns > 0 ? static_cast<double>(a.t_first_ns - t_admit) * 1e-9 : 0;
    r->t_first_token_s = a.t_first_ns > 0 ? static_cast<double>(a.t_first_ns - a.req->t_submit_ns) * 1e-9 : 0;
    r->kv_codec = kv_codec_name(a.req->codec);
    r->kv_repair = a.kv_repair;
    r->kv_splice = a.kv_splice;
    r->n_draft_tokens = a.n_draft_tokens;
    r->n_accepted_tokens = a.n_accepted_tokens;
  }
  a.done = true;
  Delivery d;
  d.sink = a.req->sink;
  d.result = std::move(r);
  d.codec = kv_codec_name(a.req->codec);
  d.repaired = !a.kv_repair.empty();
  d.spliced = !a.kv_splice.empty();
  // The shared suffix cache takes the outputs of suffix requests that drafted with at least half their draft
  // tokens accepted. One that never drafted ran where drafting does not pay; one whose drafts mostly failed
  // wrote fresh text, which later requests are no more likely to repeat than any other. Indexing costs the
  // delivery thread ~D hash updates per token (drafter.h), a tenth of a small model's step at 4 streams.
  if (suffix_cache_ && a.spec && a.spec->method() == SpecMethod::kSuffix && a.n_draft_tokens > 0 &&
      2 * a.n_accepted_tokens >= a.n_draft_tokens && d.result->ok())
    d.suffix_output = (*d.result)->ids;
  loop.out.push_back(std::move(d));
}

// Intake: requests submitted since the last round join the scheduler's waiting queue (waits while there is
// nothing to do, and while the delivery thread is more than a round behind); then cancellations and
// deadlines, running or waiting, end their requests within this round. False when the engine stops.
bool Engine::intake(Loop& loop) {
  std::deque<std::unique_ptr<Pending>> arrived;
  bool stopping = false;
  {
    absl::MutexLock lock(&mu_);
    if (loop.actives.empty()) {
      auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !pending_.empty(); };
      if (!has_work()) kernels::team::park();  // idle: no parallel region until a request comes
      mu_.Await(absl::Condition(&has_work));
    }
    stopping = stop_;
    arrived.swap(pending_);
  }
  for (auto& p : arrived) {
    auto a = std::make_unique<EngineRequest>();
    a->req = std::move(p);
    a->seq = std::make_unique<Sequence>(*model_, a->req->prompt, a->req->params, &RealClock::get());
    if (a->req->constraint) {
      a->seq->set_constraint(a->req->constraint->matcher(a->req->vocab));
      a->seq->set_sparse_masks(cfg_.sparse_masks);
    }
    a->entry.order = loop.order++;
    a->entry.tokens = &a->seq->tokens();
    a->entry.make_kv = make_kv(a.get());
    a->entry.owner = a.get();
    start_spec(*a);
    loop.sched.add(&a->entry);
    loop.actives.push_back(std::move(a));
  }
  if (stopping) return false;
  {  // at most one round ahead of the delivery thread
    absl::MutexLock lock(&dmu_);
    auto caught_up = [this]() ABSL_SHARED_LOCKS_REQUIRED(dmu_) {
      return delivered_ + 1 >= handed_ || stopping_.load();
    };
    if (!caught_up()) kernels::team::park();  // the delivery thread needs a core more than the team
    dmu_.Await(absl::Condition(&caught_up));
  }
  if (stopping_.load()) {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
  }
  for (auto& a : loop.actives)
    if (!a->done && a->seq->check_cancel(*a->req->cancel, loop.emit(*a))) finish(loop, *a, a->seq->take_result());
  return true;
}

// Schedule: the scheduler decides this round's step (scheduler.h: decodes, prompt chunks, admissions,
// preemption, prefix-cache adoption). Timed for end_round's counters.
Scheduler::Step Engine::schedule(Loop& loop) {
  const int64_t t0 = RealClock::get().now_ns();
  Scheduler::Step step = loop.sched.schedule();
  loop.t_schedule_ns = RealClock::get().now_ns() - t0;
  return step;
}

// Execute: the scheduled step on the executor. Each sequence with logits says how its token may be drawn
// (on the device when the executor samples and the request allows it, a constrained one with its mask; a
// draft's rows on the host). The masks of the constrained rows the host samples are filled while the step
// runs (engine_masks.h). True when the step ran: loop.exec_result holds what update() needs. False when it
// failed: the step's requests have ended, or every request when the device failed for good.
bool Engine::execute(Loop& loop, const Scheduler::Step& step) {
  const int64_t t0 = RealClock::get().now_ns();
  for (SchedEntry* e : step.who)
    if (e->owner->t_admit_ns == 0) e->owner->t_admit_ns = t0;
  ExecStep& xs = loop.exec_step;
  xs.seqs = &step.seqs;
  xs.sampling.clear();
  const bool device_sampling = exec_->samples_on_device();
  loop.mask_fills.clear();
  for (size_t i = 0; i < step.who.size(); ++i) {
    const StepSeq& q = step.seqs[i];
    if (q.draft > 0) {
      xs.sampling.resize(xs.sampling.size() + 1 + static_cast<size_t>(q.draft));  // verified on the host
    } else if (q.logits) {
      Sequence* seq = step.who[i]->owner->seq.get();
      xs.sampling.push_back(seq->plan_sample(device_sampling));
      if (masks_ && seq->constrained() && !xs.sampling.back().on_device) loop.mask_fills.push_back(seq);
    }
  }
  if (!loop.mask_fills.empty()) masks_->start(loop.mask_fills);
  absl::Status st = exec_->execute(xs, &loop.exec_result);
  if (!loop.mask_fills.empty()) masks_->join();  // before anything else touches those matchers
  const int64_t t1 = RealClock::get().now_ns();
  loop.decode_only = true;  // speculation's cost model (speculation.h RoundCost) learns from decode rounds
  for (const StepSeq& q : step.seqs) loop.decode_only = loop.decode_only && q.logits && q.n_tokens == 1 + q.draft;
  {
    absl::MutexLock lock(&mu_);
    counters_.t_forward_s += static_cast<double>(t1 - t0) * 1e-9;
  }
  if (st.ok()) return true;  // update() commits it once drafts are verified
  // The step failed. A broken invariant in tensor code fails the sequences of this step and the engine keeps
  // serving; a sticky device error (the executor's health) fails everything, for good.
  const absl::Status health = exec_->health();
  if (health.ok()) {
    FROST_LOG_ERROR("engine: batched step failed: %s", st.ToString().c_str());
    for (SchedEntry* e : step.who)
      if (EngineRequest* a = e->owner; !a->done) finish(loop, *a, st);
    return false;
  }
  FROST_LOG_ERROR("engine: the %s executor failed for good (%s): failing every request and refusing new ones",
                  exec_->device().c_str(), health.ToString().c_str());
  const absl::Status fail = absl::UnavailableError(absl::StrCat("device ", exec_->device(), " failed: ",
                                                                health.message()));
  {
    absl::MutexLock lock(&mu_);
    device_error_ = health;
    accepting_ = false;
  }
  if (cfg_.on_device_failure) cfg_.on_device_failure(health);
  for (auto& a : loop.actives)
    if (!a->done) finish(loop, *a, fail);
  return false;
}

// Update: every sequence that got logits gets its token — the device's where it sampled, else the host
// sampler's (in parallel: each touches only its own sampler), or a verified draft's tokens (engine_spec.cc).
// Then the KV of rejected draft rows is truncated and the step committed (newly full blocks published to the
// prefix cache: only verified positions), and the tokens stream in order.
void Engine::update(Loop& loop, const Scheduler::Step& step, const ExecResult& res) {
  const int64_t t0 = RealClock::get().now_ns();
  std::vector<EngineRequest*>& to_sample = loop.to_sample;
  to_sample.clear();
  loop.first_row.clear();
  loop.drafted.clear();
  int64_t row = 0;
  for (size_t i = 0; i < step.who.size(); ++i) {
    if (!step.seqs[i].logits) continue;
    to_sample.push_back(step.who[i]->owner);
    loop.first_row.push_back(row);
    loop.drafted.push_back(step.seqs[i].draft);
    row += step.seqs[i].n_logit_rows();
  }
  std::vector<SampledToken>& toks = loop.toks;
  toks.resize(to_sample.size());
  loop.verdicts.resize(to_sample.size());
  const int64_t V = model_->config.n_vocab;
  const auto n_sample = static_cast<int64_t>(to_sample.size());
  auto sample_one = [&](int64_t i) {
    const auto k = static_cast<size_t>(i);
    const auto r = static_cast<size_t>(loop.first_row[k]);
    if (loop.drafted[k] > 0) {
      const std::vector<int32_t>& rows = to_sample[k]->entry.spec_rows;
      loop.verdicts[k] = to_sample[k]->seq->verify(
          absl::MakeConstSpan(rows).subspan(1, static_cast<size_t>(loop.drafted[k])),
          res.logits + static_cast<int64_t>(res.row[r]) * V);
      return;
    }
    toks[k] = res.ids[r] >= 0 ? to_sample[k]->seq->sampled_on_device(res.ids[r])
                              : to_sample[k]->seq->sample(res.logits + static_cast<int64_t>(res.row[r]) * V);
  };
  if (n_sample < 4) {
    for (int64_t i = 0; i < n_sample; ++i) sample_one(i);
  } else {
    kernels::parallel_tasks(n_sample, sample_one);
  }
  const int64_t t_tok = RealClock::get().now_ns();
  rewind_rejected(loop);  // engine_spec.cc: before any block of this step is published
  loop.sched.commit(step);
  for (size_t i = 0; i < to_sample.size(); ++i) {
    EngineRequest& a = *to_sample[i];
    if (a.t_first_ns == 0) a.t_first_ns = t_tok;
    if (loop.drafted[i] == 0) {
      if (a.seq->accept(toks[i], loop.emit(a))) finish(loop, a, a.seq->take_outcome());
      continue;
    }
    const std::vector<SampledToken>& got = loop.verdicts[i].tokens;
    for (size_t j = 0; j < got.size(); ++j) {
      if (a.seq->accept(got[j], loop.emit(a), j == 0)) {
        finish(loop, a, a.seq->take_outcome());
        break;
      }
    }
  }
  const int64_t t1 = RealClock::get().now_ns();
  // The whole round, drafting to the last token emitted: what a round costs and a drafted row adds to it.
  if (loop.decode_only)
    loop.cost.observe(step.n_tokens, static_cast<double>(t1 - loop.t_round_ns) * 1e-9,
                      static_cast<double>(loop.t_draft_ns) * 1e-9);
  absl::MutexLock lock(&mu_);
  counters_.t_sample_s += static_cast<double>(t_tok - t0) * 1e-9;
  counters_.t_emit_s += static_cast<double>(t1 - t_tok) * 1e-9;
}

// End of a round: the step's counters (when one was scheduled, whether or not it ran), then the gauges,
// published before the round's tokens are handed to the delivery thread, so a client that has seen a token of
// this round reads a /metrics (or a drain log) that already counts its sequence. Finished requests leave.
void Engine::end_round(Loop& loop, const Scheduler::Step& step) {
  if (!step.seqs.empty()) {
    absl::MutexLock lock(&mu_);
    counters_.t_schedule_s += static_cast<double>(loop.t_schedule_ns) * 1e-9;
    ++counters_.n_steps;
    counters_.batch_size.observe(static_cast<double>(step.seqs.size()));
    counters_.batch_tokens.observe(static_cast<double>(step.n_tokens));
  }
  int64_t needed = 0;
  for (const SchedEntry* e : loop.sched.running()) needed += e->kv->bytes_in_use();  // a window's held rows
  publish_stats(loop.sched.preemptions(), loop.sched.prefix_queries_tokens(), loop.sched.prefix_hits_tokens(),
                static_cast<int32_t>(loop.sched.running().size()), static_cast<int32_t>(loop.sched.waiting().size()),
                needed);
  flush_kv_events();
  hand_over(loop.out);
  loop.actives.erase(std::remove_if(loop.actives.begin(), loop.actives.end(), [](const auto& a) { return a->done; }),
                     loop.actives.end());
  if (cfg_.audit_kv) {
    const std::string bad = loop.sched.audit();
    FROST_CHECK(bad.empty(), bad.c_str());
  }
}

// The round's prefix-cache events to the sink (EngineConfig::kv_events), or a snapshot of the whole cache
// when the sink asks for one after it had to drop a batch (core/kv/kv_events.h).
void Engine::flush_kv_events() {
  if (!cfg_.kv_events) return;
  if (cfg_.kv_events->take_snapshot_request()) {
    kv_events_.clear();
    books_->snapshot(&kv_events_);
  }
  if (!kv_events_.empty()) cfg_.kv_events->publish(kv_events_.take());
}

// Shutdown: everything still queued or running ends CANCELLED, exactly once — requests submitted since the
// last intake included (submit() refuses new ones from now on).
void Engine::shut_down(Loop& loop) {
  {
    std::deque<std::unique_ptr<Pending>> late;
    {
      absl::MutexLock lock(&mu_);
      late.swap(pending_);
    }
    for (auto& p : late) {
      auto a = std::make_unique<EngineRequest>();
      a->req = std::move(p);
      a->seq = std::make_unique<Sequence>(*model_, a->req->prompt, a->req->params, &RealClock::get());
      loop.actives.push_back(std::move(a));
    }
  }
  for (auto& a : loop.actives) {
    if (a->done) continue;
    a->req->cancel->cancel();
    a->seq->check_cancel(*a->req->cancel, loop.emit(*a));
    finish(loop, *a, a->seq->take_result());
  }
  publish_stats(loop.sched.preemptions(), loop.sched.prefix_queries_tokens(), loop.sched.prefix_hits_tokens(), 0, 0,
                0);
  hand_over(loop.out);
  absl::MutexLock lock(&dmu_);
  delivery_stop_ = true;
}

void Engine::run() {
  pthread_setname_np(pthread_self(), "frost-engine");  // how it shows in top -H, perf, gdb
  c10::InferenceMode inference_mode;
  SchedulerConfig sc;
  sc.max_running = cfg_.max_running;
  sc.max_batch_tokens = cfg_.max_batch_tokens;
  sc.watermark_blocks = std::max<int64_t>(1, books_->n_blocks() / 100);
  sc.prefix_caching = cfg_.prefix_caching;
  sc.max_logit_rows = exec_->max_logit_rows();
  Loop loop(sc, books_.get());
  while (intake(loop)) {
    draft(loop);  // engine_spec.cc: this round's speculative drafts
    const Scheduler::Step step = schedule(loop);
    if (!step.seqs.empty() && execute(loop, step)) update(loop, step, loop.exec_result);
    end_round(loop, step);
    if (step.seqs.empty() && !loop.actives.empty()) {
      // Nothing could run (cannot happen with a consistent config: a lone request always fits the pool).
      // Do not spin; new arrivals or cancellations change that.
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  shut_down(loop);
}

}  // namespace frost
