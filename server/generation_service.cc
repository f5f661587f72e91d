#include "server/generation_service.h"

#include <ATen/Parallel.h>
#include <pthread.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <deque>
#include <iterator>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "core/common/log.h"
#include "server/embed_exec.h"
#include "server/proto_codec.h"
#include "server/status_convert.h"
#include "server/stream_writer.h"

namespace frost::server {
namespace {
constexpr char kService[] = "frost.v1.Generation";
// Intake workers (see the header): two, so a long tokenization does not hold up every other request.
constexpr int kIntakeThreads = 2;
}  // namespace

// ---------------------------------------------------------------- GenerateCall: one Generate stream.
//
// Writes: server/stream_writer.h's CoalescingStream. Engine tokens are merged into the last queued chunk not
// yet started (nothing is dropped); the final outcome arrives once, from on_finish (or at once for requests
// refused before the engine), and the Final message goes out with the status (StartWriteAndFinish) once
// everything before it was written. A failed write (the client went away) or a message that cannot be
// serialized stops the writes and the engine; the call then finishes when the engine's outcome arrives.
//
// Lifetime: the call owns itself (`self_`) from Generate() until OnDone releases that reference; the stall
// sweeper (GenerationService::sweep_loop) may hold another one while it cuts the call, so the object outlives
// a OnDone that gRPC runs inline inside the sweeper's TryCancel().
class GenerationService::GenerateCall final : public CoalescingStream<v1::GenerateResponse> {
 public:
  // Made, owned and started by GenerationService::Generate.
  static GenerateCall* create(GenerationService* svc, grpc::CallbackServerContext* ctx,
                              const grpc::ByteBuffer& request) {
    std::shared_ptr<GenerateCall> call(new GenerateCall(svc, ctx));
    call->self_ = call;
    svc->register_call(call);
    call->start(request);
    return call.get();
  }

  // The client has read nothing for `limit_ns` while a message waited (its flow-control window is closed).
  bool stalled(int64_t now_ns, int64_t limit_ns) {
    absl::MutexLock lock(&mu_);
    return !cut_ && write_stalled_locked(now_ns, limit_ns);
  }

  // Ends a stalled call: RST_STREAM CANCELLED to the client, OnCancel stops its generation, and the pending
  // write fails, so the call finishes as soon as the engine has ended the sequence.
  void cut(double stalled_s) {
    std::lock_guard<std::recursive_mutex> guard(done_mu_);  // ctx_ lives until OnDone
    if (done_) return;
    {
      absl::MutexLock lock(&mu_);
      if (cut_) return;
      cut_ = true;
    }
    FROST_LOG_WARN(
        "Generate %s: the client read nothing for %.0f s (server.write_stall_timeout_s): stream cut",
        request_id_.c_str(), stalled_s);
    svc_->write_stalls_.fetch_add(1, std::memory_order_acq_rel);
    svc_->metrics_->record_write_stall();
    ctx_->TryCancel();  // may run OnWriteDone / OnCancel / OnDone inline, on this thread
  }

  void OnCancel() override { cancel_->cancel(); }

  void OnDone() override {
    // The call ended before our status reached the client: count what the client got. An outcome queued as
    // OK was never delivered (a client that stopped reading, flow control holding the last messages, until
    // its deadline or until it went away), and a cancel after the deadline is the deadline's.
    if (ctx_->IsCancelled() && (code_ == grpc::StatusCode::OK || code_ == grpc::StatusCode::CANCELLED)) {
      code_ = ctx_->deadline() <= std::chrono::system_clock::now() ? grpc::StatusCode::DEADLINE_EXCEEDED
                                                                   : grpc::StatusCode::CANCELLED;
    }
    svc_->metrics_->record_request("Generate", code_, seconds_since(t_arrival_ns_));
    {
      std::lock_guard<std::recursive_mutex> guard(done_mu_);
      done_ = true;
    }
    svc_->unregister_call(this);
    svc_->active_streams_.fetch_sub(1, std::memory_order_acq_rel);
    std::shared_ptr<GenerateCall> last = std::move(self_);  // deletes this here unless the sweeper holds it
  }

 private:
  // Forwards engine callbacks to the call. Owned by the engine (shared_ptr); the call outlives every callback
  // because it finishes only after on_finish.
  class Sink final : public TokenSink {
   public:
    explicit Sink(GenerateCall* call) : call_(call) {}
    void on_admitted() override { call_->admitted_.store(true, std::memory_order_release); }
    void on_token(const TokenEvent& ev) override { call_->on_token(ev); }
    void on_finish(absl::StatusOr<GenerationResult> result) override { call_->on_finish(std::move(result)); }

   private:
    GenerateCall* call_;
  };

  GenerateCall(GenerationService* svc, grpc::CallbackServerContext* ctx)
      : CoalescingStream("the client went away", /*finish_with_last_write=*/true),
        svc_(svc),
        ctx_(ctx),
        t_arrival_ns_(RealClock::get().now_ns()),
        cancel_(std::make_shared<CancelToken>()) {
    svc_->active_streams_.fetch_add(1, std::memory_order_acq_rel);
  }

  void start(const grpc::ByteBuffer& request) {
    UnaryServer server = svc_->unary_server();
    if (absl::Status st = admit(server, ctx_, "Generate"); !st.ok()) {
      if (absl::IsUnavailable(st)) return reject(st, RejectReason::kUnavailable);  // draining
      grpc::Status gs = to_grpc_status(st);
      code_ = gs.error_code();
      return close(gs);
    }
    absl::StatusOr<std::shared_ptr<Engine>> engine = svc_->serving_engine();
    if (!engine.ok()) return reject(engine.status(), RejectReason::kUnavailable);
    std::shared_ptr<const openai::PromptSource> prompts = svc_->prompts();
    v1::GenerateRequest req;
    if (absl::Status st = parse_request(request, &req); absl::IsCancelled(st)) {
      // No request message arrived: nothing to reject, the call just ends CANCELLED.
      code_ = grpc::StatusCode::CANCELLED;
      return close(to_grpc_status(st));
    } else if (!st.ok()) {
      return reject(st, RejectReason::kInvalidArgument);
    }
    request_id_ = req.request_id();
    absl::StatusOr<GenerationRequest> greq = to_generation_request(req, svc_->cfg_.limits, sampling_defaults((*engine)->model().generation));
    if (!greq.ok()) return reject(greq.status(), RejectReason::kInvalidArgument);
    want_logprobs_ = greq->params.logprobs >= 0;

    const auto deadline = ctx_->deadline();
    if (deadline != std::chrono::system_clock::time_point::max()) {
      const double remaining =
          std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count();
      if (remaining <= 0) {
        code_ = grpc::StatusCode::DEADLINE_EXCEEDED;
        return close(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                  "deadline exceeded before the request started"));
      }
      cancel_->set_timeout_s(remaining);
    }
    // Tokenization and the engine's checks run on the intake executor (see the header). The call stays alive
    // until it is finished, and only the task or the engine finishes it from here on.
    // The worker renders a chat request's messages; engine errors name the request's fields.
    req_ = std::make_shared<const v1::GenerateRequest>(std::move(req));
    auto task = [this, e = *std::move(engine), g = std::make_shared<GenerationRequest>(*std::move(greq)),
                 prompts = std::move(prompts)] {
      if (req_->messages_size() > 0) {
        if (absl::Status st = apply_chat(*req_, *prompts, svc_->cfg_.limits, g.get(), &chat_); !st.ok())
          return reject(st, absl::IsFailedPrecondition(st) ? RejectReason::kFailedPrecondition
                                                           : RejectReason::kInvalidArgument);
      }
      submit(*e, *g);
    };
    if (absl::Status q = server.executor->submit(std::move(task)); !q.ok()) {
      return reject(q, absl::IsResourceExhausted(q) ? RejectReason::kQueueFull : RejectReason::kUnavailable);
    }
  }

  // On an intake worker: hands the request to the engine, or refuses the call.
  void submit(Engine& engine, const GenerationRequest& greq) {
    // Everything the engine may call back into is initialised before submit().
    absl::Status st = engine.submit(greq, std::make_shared<Sink>(this), cancel_);
    if (st.ok()) return;
    RejectReason reason = RejectReason::kInvalidArgument;
    if (absl::IsResourceExhausted(st)) reason = RejectReason::kQueueFull;
    if (absl::IsUnavailable(st)) reason = RejectReason::kUnavailable;
    if (absl::IsFailedPrecondition(st))
      reason = RejectReason::kFailedPrecondition;  // e.g. no KVSplice active
    reject(name_request_field(st, request_fields(*req_, chat_.constraint_field)), reason);
  }

  // Refused before the engine accepted it: nothing was written yet.
  void reject(const absl::Status& st, RejectReason reason) {
    svc_->metrics_->record_rejected(reason);
    grpc::Status gs = to_grpc_status(st);
    code_ = gs.error_code();
    if (!absl::IsResourceExhausted(st)) {
      FROST_LOG_DEBUG("Generate %s refused: %s", request_id_.c_str(), st.ToString().c_str());
    }
    close(gs);
  }

  void on_token(const TokenEvent& ev) {
    const int64_t now = RealClock::get().now_ns();
    if (ev.id >= 0) {
      if (n_tokens_ == 0) {
        svc_->metrics_->record_time_to_first_token(static_cast<double>(now - t_arrival_ns_) * 1e-9);
      } else {
        svc_->metrics_->record_inter_token_latency(static_cast<double>(now - t_last_token_ns_) * 1e-9);
      }
      t_last_token_ns_ = now;
      ++n_tokens_;
    }
    // Merged into the last queued chunk: nothing in the queue has started writing.
    enqueue([&](std::deque<v1::GenerateResponse>& out) {
      if (out.empty() || !out.back().has_chunk()) out.emplace_back();
      append_token(ev, want_logprobs_, out.back().mutable_chunk());
    });
  }

  void on_finish(absl::StatusOr<GenerationResult> result) {
    // A failed write (broken) means the client went away; gRPC may not report the call cancelled yet.
    const bool client_gone = ctx_->IsCancelled() || broken();
    std::optional<v1::GenerateResponse> final_msg;
    grpc::Status status;
    if (!result.ok() && !admitted_.load(std::memory_order_acquire)) {
      // Refused after submit() returned (its constraint did not compile): a refusal, as if at submit.
      absl::Status st = name_request_field(result.status(), request_fields(*req_, chat_.constraint_field));
      RejectReason reason = RejectReason::kInvalidArgument;
      if (absl::IsResourceExhausted(st)) reason = RejectReason::kQueueFull;
      if (absl::IsUnavailable(st)) reason = RejectReason::kUnavailable;
      if (absl::IsFailedPrecondition(st)) reason = RejectReason::kFailedPrecondition;
      svc_->metrics_->record_rejected(reason);
      FROST_LOG_DEBUG("Generate %s refused: %s", request_id_.c_str(), st.ToString().c_str());
      status = to_grpc_status(st);
    } else if (!result.ok()) {
      FROST_LOG_ERROR("Generate %s failed: %s", request_id_.c_str(), result.status().ToString().c_str());
      status = to_grpc_status(result.status());
    } else {
      const GenerationResult& r = *result;
      svc_->metrics_->record_generation(r.n_prompt, r.n_completion, r.t_queue_s, seconds_since(t_arrival_ns_),
                                        finish_reason_name(r.finish_reason));
      if (r.finish_reason == FinishReason::kDeadline) {
        status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              absl::StrCat("deadline exceeded after ", r.n_completion, " generated tokens"));
      } else if (r.finish_reason == FinishReason::kCancelled && client_gone) {
        status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      } else {
        // Completed, or cancelled by a server drain: the client gets the final message (a chat request's
        // with the tool calls parsed out of its output).
        final_msg = final_message(r);
        add_tool_calls(chat_, r.text, final_msg->mutable_final());
      }
    }
    // A client that went away sees CANCELLED whatever we send; count it as such.
    code_ = client_gone && status.ok() ? grpc::StatusCode::CANCELLED : status.error_code();
    close(status, std::move(final_msg));  // the Final after every queued chunk (not when broken)
  }

  // The stream can write no more: stop the engine; its on_finish finishes the call.
  void on_broken(const absl::Status& why, bool write_failed) override {
    // A message we built cannot fail to serialize (text is valid UTF-8 by construction): log it.
    if (!write_failed) FROST_LOG_ERROR("Generate %s: %s", request_id_.c_str(), why.ToString().c_str());
    cancel_->cancel();
  }
  void before_finish(const grpc::Status& st, bool failed) override {
    if (failed) code_ = st.error_code();
  }

  GenerationService* svc_;
  grpc::CallbackServerContext* ctx_;
  const int64_t t_arrival_ns_;
  std::shared_ptr<CancelToken> cancel_;
  std::string request_id_;
  bool want_logprobs_ = false;
  // The request (for the field names of engine errors, and a chat request's messages); set before the intake
  // task is queued, read-only after.
  std::shared_ptr<const v1::GenerateRequest> req_;
  GrpcChat chat_;                      // set by the intake worker before Engine::submit, read in on_finish
  std::atomic<bool> admitted_{false};  // the engine queued the request (TokenSink::on_admitted)
  // Engine thread only.
  int64_t n_tokens_ = 0;
  int64_t t_last_token_ns_ = 0;

  bool cut_ ABSL_GUARDED_BY(mu_) = false;  // cut() ran: the client stopped reading (mu_: the stream's)
  // Read in OnDone (after Finish, which orders it); written before Finish.
  grpc::StatusCode code_ = grpc::StatusCode::OK;

  std::shared_ptr<GenerateCall> self_;  // released by OnDone
  std::recursive_mutex done_mu_;  // OnDone vs cut(): recursive, as OnDone may run inside cut()'s TryCancel
  bool done_ = false;             // guarded by done_mu_
};

// ---------------------------------------------------------------------------------------

GenerationService::GenerationService(const ServerConfig& cfg, Metrics* metrics)
    : cfg_(cfg),
      metrics_(metrics),
      embed_("frost-embed", cfg.prediction.threads, cfg.prediction.max_queued,
             [intra_op = cfg.model.threads] {
               if (intra_op > 0) at::set_num_threads(intra_op);
             }),
      intake_("frost-intake", kIntakeThreads, std::max(64, cfg.engine.max_running + cfg.engine.max_waiting)) {
  if (cfg_.server.write_stall_timeout_s > 0) sweeper_ = std::thread([this] { sweep_loop(); });
}

GenerationService::~GenerationService() {
  {
    absl::MutexLock lock(&calls_mu_);
    stop_sweeper_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
}

void GenerationService::register_call(const std::shared_ptr<GenerateCall>& call) {
  absl::MutexLock lock(&calls_mu_);
  calls_.emplace(call.get(), call);
}

void GenerationService::unregister_call(GenerateCall* call) {
  absl::MutexLock lock(&calls_mu_);
  calls_.erase(call);
}

void GenerationService::sweep_loop() {
  pthread_setname_np(pthread_self(), "frost-stalls");
  const int64_t limit_ns = int64_t{cfg_.server.write_stall_timeout_s} * 1000000000;
  // Checked a few times per timeout (at most every second), so a stream is cut within 1.25 × the timeout.
  const absl::Duration every =
      std::min(absl::Seconds(1), absl::Seconds(cfg_.server.write_stall_timeout_s) / 4);
  for (;;) {
    std::vector<std::shared_ptr<GenerateCall>> stalled;
    {
      absl::MutexLock lock(&calls_mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(calls_mu_) { return stop_sweeper_; };
      if (calls_mu_.AwaitWithTimeout(absl::Condition(&stop), every)) return;
      const int64_t now = RealClock::get().now_ns();
      for (auto& [raw, weak] : calls_) {
        if (std::shared_ptr<GenerateCall> c = weak.lock(); c && c->stalled(now, limit_ns))
          stalled.push_back(c);
      }
    }
    // Outside calls_mu_: a cut may run the call's OnDone (which unregisters it) on this thread.
    for (const auto& c : stalled) c->cut(static_cast<double>(limit_ns) * 1e-9);
  }
}

void GenerationService::set_engine(std::shared_ptr<Engine> engine,
                                   std::shared_ptr<const openai::PromptSource> prompts) {
  if (engine && !prompts) {
    const LoadedModel& m = engine->model();
    prompts = std::make_shared<const openai::PromptSource>(openai::make_prompt_source(
        m.tokenizer.get(), m.name, m.source, cfg_.model.chat_template, engine->max_context()));
  }
  absl::MutexLock lock(&mu_);
  engine_ = std::move(engine);
  prompts_ = std::move(prompts);
}

std::shared_ptr<const openai::PromptSource> GenerationService::prompts() const {
  absl::MutexLock lock(&mu_);
  return prompts_;
}

std::shared_ptr<Engine> GenerationService::engine() const {
  absl::MutexLock lock(&mu_);
  return engine_;
}

UnaryServer GenerationService::unary_server() {
  UnaryServer s;
  s.service = kService;
  s.auth = auth_;
  s.draining = [this] { return draining_.load(std::memory_order_acquire); };
  s.metrics = metrics_;
  s.executor = &intake_;
  return s;
}

absl::StatusOr<std::shared_ptr<Engine>> GenerationService::serving_engine() const {
  std::shared_ptr<Engine> e = engine();
  if (!e) return absl::UnavailableError("model is loading: not ready yet");
  return e;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(grpc::CallbackServerContext* ctx,
                                                                        const grpc::ByteBuffer* request) {
  return GenerateCall::create(this, ctx, *request);
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  struct Job {
    std::shared_ptr<Engine> engine;
    v1::TokenizeRequest req;
  };
  // On the callback thread: the engine and the text checks; the tokenizer runs on the intake executor.
  auto validate = [this](v1::TokenizeRequest&& req) -> absl::StatusOr<Job> {
    absl::StatusOr<std::shared_ptr<Engine>> engine = serving_engine();
    if (!engine.ok()) return engine.status();
    if (absl::Status st = check_prompt_text("text", req.text(), cfg_.limits); !st.ok()) return st;
    if (!(*engine)->model().tokenizer)
      return absl::FailedPreconditionError("the served model has no tokenizer");
    return Job{*std::move(engine), std::move(req)};
  };
  auto tokenize = [](const Job& job) -> absl::StatusOr<v1::TokenizeResponse> {
    absl::StatusOr<std::vector<int32_t>> ids = job.engine->model().tokenizer->encode(
        job.req.text(), job.req.has_add_bos() ? job.req.add_bos() : true);
    if (!ids.ok()) return ids.status();
    v1::TokenizeResponse response;
    response.mutable_token_ids()->Assign(ids->begin(), ids->end());
    return response;
  };
  return serve_unary<v1::TokenizeRequest, v1::TokenizeResponse>(
      unary_server(), ctx, in, out, {"Tokenize", Mode::kExecutor}, validate, tokenize);
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  // In-memory: on the callback thread. Model info stays available while draining (it is cheap and helps
  // debugging).
  return serve_unary<v1::ModelInfoRequest, v1::ModelInfo>(
      unary_server(), ctx, in, out, {"GetModelInfo", Mode::kInline, /*refuse_while_draining=*/false},
      [this](const v1::ModelInfoRequest&) -> absl::StatusOr<v1::ModelInfo> {
        std::shared_ptr<Engine> e = engine();
        if (!e) return absl::UnavailableError("model is loading: not ready yet");
        return model_info(*e, cfg_);
      });
}

grpc::ServerUnaryReactor* GenerationService::Embed(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                   grpc::ByteBuffer* out) {
  struct Job {
    std::shared_ptr<Engine> engine;
    EmbedInputs inputs;
  };
  // On the callback thread: the engine and the checks that need no tokenizer or model (server/embed_exec.h).
  auto validate = [this](v1::EmbedRequest&& req) -> absl::StatusOr<Job> {
    absl::StatusOr<std::shared_ptr<Engine>> engine = serving_engine();
    if (!engine.ok()) return engine.status();
    Job job{*std::move(engine), {}};
    job.inputs.texts.assign(std::make_move_iterator(req.mutable_texts()->begin()),
                            std::make_move_iterator(req.mutable_texts()->end()));
    for (const v1::TokenIds& t : req.token_ids()) job.inputs.ids.emplace_back(t.ids().begin(), t.ids().end());
    if (absl::Status st = check_embed_inputs(job.engine->model(), job.inputs, cfg_.limits); !st.ok()) return st;
    return job;
  };
  auto embed = [](const Job& job) -> absl::StatusOr<v1::EmbedResponse> {
    absl::StatusOr<EmbedOutput> r = run_embed(job.engine->model(), job.inputs);
    if (!r.ok()) return r.status();
    v1::EmbedResponse response;
    for (size_t i = 0; i < r->vectors.size(); ++i) {
      v1::Embedding* e = response.add_embeddings();
      e->mutable_values()->Assign(r->vectors[i].begin(), r->vectors[i].end());
      e->set_n_tokens(r->n_tokens[i]);
    }
    response.set_prompt_tokens(static_cast<int32_t>(r->prompt_tokens));
    return response;
  };
  UnaryServer server = unary_server();
  server.executor = &embed_;
  return serve_unary<v1::EmbedRequest, v1::EmbedResponse>(server, ctx, in, out, {"Embed", Mode::kExecutor}, validate,
                                                          embed);
}

}  // namespace frost::server
