#include "core/generate/engine.h"

#include <c10/core/InferenceMode.h>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/generate/sequence.h"

namespace frost {

// A validated request waiting for admission.
struct Engine::Pending {
  std::vector<int32_t> prompt;
  SamplingParams params;
  KvCodecKind codec = KvCodecKind::kF32;
  GenerationRequest::KvRepair repair_mode = GenerationRequest::KvRepair::kAuto;
  // kvsplice: the KVSplice active at submit (the sequence starts with the one active at admission, this
  // one when the slot was emptied in between).
  std::shared_ptr<const KvSpliceSlot::Active> splice;
  std::shared_ptr<TokenSink> sink;
  std::shared_ptr<CancelToken> cancel;
  int64_t t_submit_ns = 0;
};

// An admitted request: its own KV cache, scratch and state machine.
struct Engine::Active {
  std::unique_ptr<Pending> req;
  std::unique_ptr<SequenceKv> kv;
  DecodeScratch scratch;
  std::unique_ptr<Sequence> seq;
  double t_queue_s = 0;
  int64_t kv_bytes = 0;   // allocated for this sequence (counted in kv_bytes_in_use_)
  std::string kv_repair;  // the repair operator it runs with ("" = none)
  std::string kv_splice;  // the KVSplice it stores its KV with ("" = none)
};

Engine::Engine(std::shared_ptr<const LoadedModel> model, const EngineConfig& cfg)
    : model_(std::move(model)), cfg_(cfg), validator_(*model_, cfg.gen) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const LoadedModel> model,
                                                       const EngineConfig& cfg) {
  if (!model || !model->model) return absl::InvalidArgumentError("engine: no model");
  if (cfg.max_running < 1) {
    return absl::InvalidArgumentError(absl::StrCat("engine.max_running must be >= 1, got ", cfg.max_running));
  }
  if (cfg.max_waiting < 0) {
    return absl::InvalidArgumentError(absl::StrCat("engine.max_waiting must be >= 0, got ", cfg.max_waiting));
  }
  std::unique_ptr<Engine> e(new Engine(std::move(model), cfg));
  const KvSpec spec = e->model_->model->kv_spec(e->validator_.max_context(), cfg.gen.kv_codec);
  int64_t per_token = 0;
  // kvsplice as the default codec: the bytes depend on the active set's rank, so stats() computes them at
  // read time (KvSpliceSet::bytes_per_token; 0 while none is active) instead of allocating a cache here.
  if (cfg.gen.kv_codec != KvCodecKind::kKvSplice) {
    // bytes of one position, all layers (the codec decides the element size)
    FROST_ASSIGN_OR_RETURN(per_token, torch_call([&] {
                             KvSpec one = spec;
                             one.max_tokens = 1;
                             return SequenceKv(one).bytes_per_token();
                           }));
  }
  {
    absl::MutexLock lock(&e->mu_);
    e->counters_.kv_bytes_per_token = per_token;
    e->counters_.kv_codec = kv_codec_name(cfg.gen.kv_codec);
  }
  e->worker_ = std::thread([raw = e.get()] { raw->run(); });
  return e;
}

Engine::~Engine() { shutdown(); }

absl::Status Engine::submit(const GenerationRequest& req, std::shared_ptr<TokenSink> sink,
                            std::shared_ptr<CancelToken> cancel) {
  if (!sink || !cancel) return absl::InvalidArgumentError("engine: submit needs a sink and a cancel token");
  // Validation and tokenization run on the caller's thread, before any model work.
  absl::StatusOr<std::vector<int32_t>> prompt = validator_.prepare(req);
  if (!prompt.ok()) return prompt.status();
  auto p = std::make_unique<Pending>();
  p->prompt = std::move(prompt).value();
  p->params = req.params;
  p->codec = req.kv_codec.value_or(cfg_.gen.kv_codec);
  p->repair_mode = req.kv_repair;
  if (p->codec == KvCodecKind::kKvSplice) {
    p->splice = cfg_.kv_splice ? cfg_.kv_splice->get() : nullptr;
    if (!p->splice || !p->splice->set) {
      return absl::FailedPreconditionError(
          "kv.codec: kvsplice but no KVSplice is active (train a kvsplice job and activate it, or set "
          "engine.kv_splice)");
    }
  }
  if (req.kv_repair == GenerationRequest::KvRepair::kOn) {
    std::shared_ptr<const RepairSlot::Active> r = cfg_.kv_repair ? cfg_.kv_repair->get() : nullptr;
    if (!r) {
      return absl::FailedPreconditionError(
          "kv.repair: ON but no KV repair operator is active (train a kv_repair job and activate it, or set "
          "engine.kv_repair)");
    }
    if (r->codec != p->codec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kv.repair: ON but the active operator ", r->name, " repairs the ", kv_codec_name(r->codec),
          " codec and this request stores its KV as ", kv_codec_name(p->codec)));
    }
  }
  p->sink = std::move(sink);
  p->cancel = std::move(cancel);
  p->t_submit_ns = RealClock::get().now_ns();
  absl::MutexLock lock(&mu_);
  if (!accepting_) return absl::UnavailableError("server is shutting down: not accepting new requests");
  const int64_t in_flight = n_running_ + static_cast<int64_t>(pending_.size());
  if (in_flight >= static_cast<int64_t>(cfg_.max_running) + cfg_.max_waiting) {
    ++counters_.n_rejected_full;
    return absl::ResourceExhaustedError(absl::StrCat("server busy: ", n_running_, " running and ",
                                                     pending_.size(), " waiting requests (limits ",
                                                     cfg_.max_running, " + ", cfg_.max_waiting, ")"));
  }
  ++counters_.n_accepted;
  pending_.push_back(std::move(p));
  return absl::OkStatus();
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&mu_);
  EngineStats s = counters_;
  s.n_running = n_running_;
  s.n_waiting = static_cast<int32_t>(pending_.size());
  s.kv_bytes_in_use = kv_bytes_in_use_;
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
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return n_running_ == 0 && pending_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(timeout_s));
}

void Engine::shutdown() {
  {
    absl::MutexLock lock(&mu_);
    accepting_ = false;
    stop_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

void Engine::admit_locked(std::vector<std::unique_ptr<Pending>>& out) {
  while (!pending_.empty() && n_running_ + static_cast<int32_t>(out.size()) < cfg_.max_running) {
    out.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  n_running_ += static_cast<int32_t>(out.size());
}

void Engine::run() {
  c10::InferenceMode inference_mode;
  std::vector<std::unique_ptr<Active>> active;
  auto finish = [this](Active& a, absl::StatusOr<GenerationResult> r) {
    if (r.ok()) {
      r->t_queue_s = a.t_queue_s;
      r->kv_codec = kv_codec_name(a.req->codec);
      r->kv_repair = a.kv_repair;
      r->kv_splice = a.kv_splice;
    }
    a.kv.reset();  // release the KV memory before telling the client
    {
      absl::MutexLock lock(&mu_);
      kv_bytes_in_use_ -= a.kv_bytes;
      a.kv_bytes = 0;
    }
    a.req->sink->on_finish(std::move(r));
    absl::MutexLock lock(&mu_);
    --n_running_;
    ++counters_.n_finished;
    if (!a.kv_repair.empty()) ++counters_.n_repaired;
    if (!a.kv_splice.empty()) ++counters_.n_spliced;
    ++counters_.finished_by_codec[kv_codec_name(a.req->codec)];
  };
  // A request cancelled (or past its deadline) while it waited: no KV is allocated for it.
  auto finish_unstarted = [this](Pending& p, FinishReason reason) {
    GenerationResult r;
    r.finish_reason = reason;
    r.prompt_ids = p.prompt;
    r.n_prompt = static_cast<int32_t>(p.prompt.size());
    p.sink->on_finish(std::move(r));
    absl::MutexLock lock(&mu_);
    ++counters_.n_finished;
  };

  for (;;) {
    // 1. schedule: admit waiting requests into free running slots (or sleep until work)
    std::vector<std::unique_ptr<Pending>> admitted;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      if (active.empty()) {
        auto has_work = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !pending_.empty(); };
        mu_.Await(absl::Condition(&has_work));
      }
      stopping = stop_;
      if (!stopping) admit_locked(admitted);
    }
    if (stopping) break;
    const int64_t now = RealClock::get().now_ns();
    for (auto& p : admitted) {
      const CancelToken::State cs = p->cancel->state();
      if (cs != CancelToken::State::kRunning) {
        finish_unstarted(
            *p, cs == CancelToken::State::kCancelled ? FinishReason::kCancelled : FinishReason::kDeadline);
        absl::MutexLock lock(&mu_);
        --n_running_;
        continue;
      }
      auto a = std::make_unique<Active>();
      a->t_queue_s = static_cast<double>(now - p->t_submit_ns) * 1e-9;
      a->req = std::move(p);
      absl::Status st = torch_call([&] {
        std::shared_ptr<const KvSpliceSet> splice;
        if (a->req->codec == KvCodecKind::kKvSplice) {
          // The Active of this moment (a later swap does not touch this sequence; it holds the set).
          std::shared_ptr<const KvSpliceSlot::Active> sp = cfg_.kv_splice ? cfg_.kv_splice->get() : nullptr;
          if (!sp || !sp->set) sp = a->req->splice;
          a->req->splice.reset();
          splice = sp->set;
          a->kv_splice = sp->name;
        }
        a->kv = std::make_unique<SequenceKv>(
            model_->model->kv_spec(validator_.max_context(), a->req->codec, std::move(splice)));
        if (std::shared_ptr<const RepairSlot::Active> r = cfg_.kv_repair ? cfg_.kv_repair->get() : nullptr;
            r && r->codec == a->req->codec && a->req->repair_mode != GenerationRequest::KvRepair::kOff) {
          KvStages stages;
          stages.repair = r->set;
          a->kv->set_stages(std::move(stages));
          a->kv_repair = r->name;
        }
        a->scratch = model_->model->make_scratch(validator_.max_context());
        a->kv_bytes = a->kv->bytes_allocated();
      });
      {
        absl::MutexLock lock(&mu_);
        kv_bytes_in_use_ += a->kv_bytes;
      }
      if (!st.ok()) {
        finish(*a, st);
        continue;
      }
      a->seq = std::make_unique<Sequence>(*model_, a->req->prompt, a->req->params, *a->kv, a->scratch,
                                          cfg_.gen.fast_decode, &RealClock::get());
      active.push_back(std::move(a));
    }

    // 2. run: one step (one forward pass) per active sequence, round-robin
    for (size_t i = 0; i < active.size();) {
      Active& a = *active[i];
      TokenSink& sink = *a.req->sink;
      absl::StatusOr<bool> done =
          a.seq->step([&sink](const TokenEvent& ev) { sink.on_token(ev); }, *a.req->cancel);
      if (!done.ok() || *done) {
        if (!done.ok()) FROST_LOG_ERROR("engine: sequence failed: %s", done.status().ToString().c_str());
        finish(a, done.ok() ? absl::StatusOr<GenerationResult>(a.seq->take_result())
                            : absl::StatusOr<GenerationResult>(done.status()));
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }

  // 3. shutdown: everything still queued or running ends CANCELLED, exactly once
  for (auto& a : active) {
    a->req->cancel->cancel();
    (void)a->seq->step([&](const TokenEvent& ev) { a->req->sink->on_token(ev); }, *a->req->cancel);
    finish(*a, a->seq->take_result());
  }
  std::deque<std::unique_ptr<Pending>> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(pending_);
  }
  for (auto& p : left) finish_unstarted(*p, FinishReason::kCancelled);
}

}  // namespace frost
