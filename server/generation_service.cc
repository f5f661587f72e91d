#include "server/generation_service.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/clock.h"
#include "core/common/log.h"
#include "kernels/cpu/isa.h"
#include "core/common/utf8.h"
#include "server/proto_codec.h"
#include "server/status_convert.h"

namespace frost::server {
namespace {

absl::Status invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

double seconds_since(int64_t t0_ns) { return static_cast<double>(RealClock::get().now_ns() - t0_ns) * 1e-9; }

v1::FinishReason to_proto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline:
      return v1::FINISH_REASON_DEADLINE;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// Text limits shared by Generate and Tokenize.
absl::Status check_text(const std::string& field, const std::string& text, const LimitsSection& limits) {
  if (text.empty()) return invalid(absl::StrCat(field, ": must not be empty"));
  if (text.size() > static_cast<size_t>(limits.max_prompt_bytes)) {
    return invalid(absl::StrCat(field, ": ", text.size(),
                                " bytes is over limits.max_prompt_bytes = ", limits.max_prompt_bytes));
  }
  if (const size_t bad = utf8_valid_prefix(text); bad < text.size()) {
    return invalid(
        absl::StrCat(field, ": not valid UTF-8 (invalid byte at offset ", bad, " of ", text.size(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationRequest> to_generation_request(const v1::GenerateRequest& req,
                                                        const LimitsSection& limits) {
  if (req.request_id().size() > kMaxRequestIdBytes) {
    return invalid(absl::StrCat("request_id: ", req.request_id().size(), " bytes is over the limit of ",
                                kMaxRequestIdBytes));
  }
  if (!is_valid_utf8(req.request_id())) return invalid("request_id: not valid UTF-8");

  GenerationRequest out;
  switch (req.prompt_case()) {
    case v1::GenerateRequest::kText: {
      absl::Status st = check_text("text", req.text(), limits);
      if (!st.ok()) return st;
      out.prompt = req.text();
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      if (req.token_ids().ids().empty()) return invalid("token_ids.ids: must not be empty");
      if (const int n = req.token_ids().ids_size(); n > kMaxPromptTokenIds) {
        return invalid(absl::StrCat("token_ids.ids: ", n, " ids is more than the cap of ", kMaxPromptTokenIds));
      } else if (limits.max_prompt_tokens > 0 && n > limits.max_prompt_tokens) {
        return invalid(absl::StrCat("token_ids.ids: ", n, " ids is more than limits.max_prompt_tokens=",
                                    limits.max_prompt_tokens));
      }
      out.prompt_ids.assign(req.token_ids().ids().begin(), req.token_ids().ids().end());
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return invalid("prompt: one of text or token_ids must be set");
  }
  if (req.has_add_bos()) out.add_bos = req.add_bos();

  // Unset optional fields keep the engine defaults of SamplingParams.
  const v1::SamplingParams& s = req.sampling();
  SamplingParams& p = out.params;
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) p.seed = s.seed();
  if (s.has_max_new_tokens()) p.max_new_tokens = s.max_new_tokens();
  // Early, cheap checks on repeated fields, before they are copied, so a huge list never reaches the engine.
  if (s.stop_size() > limits.max_stop_strings) {
    return invalid(
        absl::StrCat("sampling.stop: at most ", limits.max_stop_strings, " strings, got ", s.stop_size()));
  }
  if (s.stop_token_ids_size() > limits.max_stop_token_ids) {
    return invalid(absl::StrCat("sampling.stop_token_ids: at most ", limits.max_stop_token_ids,
                                " ids (limits.max_stop_token_ids), got ", s.stop_token_ids_size()));
  }
  p.stop.assign(s.stop().begin(), s.stop().end());
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  if (s.has_ignore_eos()) p.ignore_eos = s.ignore_eos();
  if (s.has_logprobs()) {
    if (s.logprobs() < 0 || s.logprobs() > limits.max_logprobs) {
      return invalid(
          absl::StrCat("sampling.logprobs must be in [0, ", limits.max_logprobs, "], got ", s.logprobs()));
    }
    p.logprobs = s.logprobs();
  }
  switch (s.constraint_case()) {
    case v1::SamplingParams::kJsonSchema:
      out.constraint = {constrain::ConstraintSpec::Kind::kJsonSchema, s.json_schema()};
      break;
    case v1::SamplingParams::kJsonObject:
      if (s.json_object()) out.constraint = {constrain::ConstraintSpec::Kind::kJsonObject, ""};
      break;
    case v1::SamplingParams::kRegex:
      out.constraint = {constrain::ConstraintSpec::Kind::kRegex, s.regex()};
      break;
    case v1::SamplingParams::kGrammar:
      out.constraint = {constrain::ConstraintSpec::Kind::kGrammar, s.grammar()};
      break;
    case v1::SamplingParams::CONSTRAINT_NOT_SET:
      break;
  }
  if (req.kv().has_codec()) {
    absl::StatusOr<KvCodecKind> codec = parse_kv_codec(req.kv().codec());
    if (!codec.ok()) {
      return invalid(absl::StrCat("kv.codec: unknown value \"", req.kv().codec(),
                                  "\" (expected fp32|fp16|bf16|int8|int4|kvsplice)"));
    }
    out.kv_codec = *codec;
  }
  if (req.kv().has_repair()) {
    switch (req.kv().repair()) {
      case v1::KV_REPAIR_MODE_AUTO:
        out.kv_repair = GenerationRequest::KvRepair::kAuto;
        break;
      case v1::KV_REPAIR_MODE_ON:
        out.kv_repair = GenerationRequest::KvRepair::kOn;
        break;
      case v1::KV_REPAIR_MODE_OFF:
        out.kv_repair = GenerationRequest::KvRepair::kOff;
        break;
      default:
        return invalid(absl::StrCat("kv.repair: unknown value ", static_cast<int>(req.kv().repair()),
                                    " (expected KV_REPAIR_MODE_AUTO|ON|OFF)"));
    }
  }
  return out;
}

// ---------------------------------------------------------------- GenerateCall: one Generate stream.
//
// State machine, all under mu_: `out_` holds messages not yet started; `writing_` is set while `wire_` (the
// serialized message before them) is in flight. Engine events append to `out_` (coalescing tokens into its
// last chunk); pump() serializes the front into `wire_` and starts the write; OnWriteDone starts the next.
// The final outcome arrives once, from on_finish (or at once for requests refused before the engine); the
// call is finished when everything before it was written. gRPC calls are made outside mu_, and nothing
// touches `this` after Finish()/StartWriteAndFinish(): OnDone may release it at once.
//
// Lifetime: the call owns itself (`self_`) from Generate() until OnDone releases that reference; the stall
// sweeper (GenerationService::sweep_loop) may hold another one while it cuts the call, so the object outlives a
// OnDone that gRPC runs inline inside the sweeper's TryCancel().
class GenerationService::GenerateCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
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
    return writing_ && !cut_ && now_ns - t_write_ns_ > limit_ns;
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
    FROST_LOG_WARN("Generate %s: the client read nothing for %.0f s (server.write_stall_timeout_s): stream cut",
                   request_id_.c_str(), stalled_s);
    svc_->write_stalls_.fetch_add(1, std::memory_order_acq_rel);
    svc_->metrics_->record_write_stall();
    ctx_->TryCancel();  // may run OnWriteDone / OnCancel / OnDone inline, on this thread
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) broken_ = true;  // the client is gone: stop writing, wait for on_finish
    }
    if (!ok) cancel_->cancel();
    pump();
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
    void on_token(const TokenEvent& ev) override { call_->on_token(ev); }
    void on_finish(absl::StatusOr<GenerationResult> result) override { call_->on_finish(std::move(result)); }

   private:
    GenerateCall* call_;
  };

  GenerateCall(GenerationService* svc, grpc::CallbackServerContext* ctx)
      : svc_(svc), ctx_(ctx), t_arrival_ns_(RealClock::get().now_ns()), cancel_(std::make_shared<CancelToken>()) {
    svc_->active_streams_.fetch_add(1, std::memory_order_acq_rel);
  }

  void start(const grpc::ByteBuffer& request) {
    if (svc_->auth_) {
      if (absl::Status st = svc_->auth_->check("/frost.v1.Generation/Generate", ctx_); !st.ok()) {
        grpc::Status gs = to_grpc_status(st);
        code_ = gs.error_code();
        return Finish(gs);
      }
    }
    absl::StatusOr<std::shared_ptr<Engine>> engine = svc_->serving_engine();
    if (!engine.ok()) return reject(engine.status(), RejectReason::kUnavailable);
    v1::GenerateRequest req;
    if (absl::Status st = parse_request(request, &req); absl::IsCancelled(st)) {
      // No request message arrived: nothing to reject, the call just ends CANCELLED.
      code_ = grpc::StatusCode::CANCELLED;
      return Finish(to_grpc_status(st));
    } else if (!st.ok()) {
      return reject(st, RejectReason::kInvalidArgument);
    }
    request_id_ = req.request_id();
    absl::StatusOr<GenerationRequest> greq = to_generation_request(req, svc_->cfg_.limits);
    if (!greq.ok()) return reject(greq.status(), RejectReason::kInvalidArgument);
    want_logprobs_ = greq->params.logprobs >= 0;

    const auto deadline = ctx_->deadline();
    if (deadline != std::chrono::system_clock::time_point::max()) {
      const double remaining =
          std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count();
      if (remaining <= 0) {
        code_ = grpc::StatusCode::DEADLINE_EXCEEDED;
        return Finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                   "deadline exceeded before the request started"));
      }
      cancel_->set_timeout_s(remaining);
    }
    // Everything the engine may call back into is initialised before submit().
    absl::Status st = (*engine)->submit(*greq, std::make_shared<Sink>(this), cancel_);
    if (!st.ok()) {
      RejectReason reason = RejectReason::kInvalidArgument;
      if (absl::IsResourceExhausted(st)) reason = RejectReason::kQueueFull;
      if (absl::IsUnavailable(st)) reason = RejectReason::kUnavailable;
      if (absl::IsFailedPrecondition(st)) reason = RejectReason::kFailedPrecondition;  // e.g. no KVSplice active
      // The engine names a constraint that does not compile "constraint"; the client knows its proto field.
      if (absl::StartsWith(st.message(), "constraint: ")) {
        static constexpr const char* kField[] = {"sampling", "sampling.json_schema", "sampling.json_object",
                                                 "sampling.regex", "sampling.grammar"};
        const std::string field = kField[static_cast<int>(greq->constraint.kind)];
        return reject(absl::Status(st.code(), absl::StrCat(field, st.message().substr(10))), reason);
      }
      return reject(st, reason);
    }
  }

  // Refused before the engine accepted it: nothing was written yet.
  void reject(const absl::Status& st, RejectReason reason) {
    svc_->metrics_->record_rejected(reason);
    grpc::Status gs = to_grpc_status(st);
    code_ = gs.error_code();
    if (!absl::IsResourceExhausted(st)) {
      FROST_LOG_DEBUG("Generate %s refused: %s", request_id_.c_str(), st.ToString().c_str());
    }
    Finish(gs);
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
    {
      absl::MutexLock lock(&mu_);
      if (broken_) return;
      // Coalesce into the last queued chunk: nothing in out_ has started writing.
      if (out_.empty() || !out_.back().has_chunk()) out_.emplace_back();
      v1::TokenChunk* chunk = out_.back().mutable_chunk();
      chunk->mutable_text()->append(ev.text);
      if (ev.id >= 0) {
        chunk->add_token_ids(ev.id);
        if (want_logprobs_) {
          v1::TokenLogprobs* lp = chunk->add_logprobs();
          lp->mutable_sampled()->set_token_id(ev.id);
          lp->mutable_sampled()->set_logprob(ev.logprob);
          for (const TokenLogprob& alt : ev.top_logprobs) {
            v1::TokenLogprob* t = lp->add_top();
            t->set_token_id(alt.id);
            t->set_logprob(alt.logprob);
          }
        }
      }
    }
    pump();
  }

  void on_finish(absl::StatusOr<GenerationResult> result) {
    bool client_gone = ctx_->IsCancelled();
    {
      absl::MutexLock lock(&mu_);
      // A failed write (OnWriteDone(false)) means the client went away; gRPC may not report the call
      // cancelled yet.
      client_gone = client_gone || broken_;
    }
    std::optional<v1::GenerateResponse> final_msg;
    grpc::Status status;
    if (!result.ok()) {
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
        // Completed, or cancelled by a server drain: the client gets the final message.
        v1::GenerateResponse msg;
        v1::Final* f = msg.mutable_final();
        f->set_finish_reason(to_proto(r.finish_reason));
        f->set_stop_reason(r.stop_reason);
        f->set_prompt_tokens(r.n_prompt);
        f->set_completion_tokens(r.n_completion);
        f->set_kv_codec(r.kv_codec);
        f->set_kv_repair(r.kv_repair);
        f->set_kv_splice(r.kv_splice);
        v1::Timings* t = f->mutable_timings();
        t->set_queue_s(r.t_queue_s);
        t->set_prefill_s(r.t_prefill_s);
        t->set_decode_s(r.t_decode_s);
        t->set_time_to_first_token_s(r.t_first_token_s);
        t->set_decode_tokens_per_s(r.decode_tok_s());
        final_msg = std::move(msg);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      // A client that went away sees CANCELLED whatever we send; count it as such.
      code_ = client_gone && status.ok() ? grpc::StatusCode::CANCELLED : status.error_code();
      if (final_msg && !broken_) out_.push_back(std::move(*final_msg));
      final_status_ = status;
      has_final_ = true;
    }
    pump();
  }

  // Starts the next write, or finishes the call when only the outcome is left.
  void pump() {
    enum class Action { kNone, kWrite, kWriteAndFinish, kFinish } action = Action::kNone;
    grpc::Status status;
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (!out_.empty() && !broken_) {
        const bool last = has_final_ && out_.size() == 1 && out_.front().has_final();
        if (absl::Status st = serialize_response(out_.front(), &wire_); !st.ok()) {
          // Cannot happen for messages we built (text is valid UTF-8 by construction). Stop writing, stop the
          // engine, and fail the call once on_finish has come (the engine holds our sink until then).
          FROST_LOG_ERROR("Generate %s: %s", request_id_.c_str(), st.ToString().c_str());
          failed_ = to_grpc_status(st);
          broken_ = true;
          cancel = true;
        } else {
          out_.pop_front();
          writing_ = true;
          t_write_ns_ = RealClock::get().now_ns();
          // The final message goes out together with the status (one less round trip).
          action = last ? Action::kWriteAndFinish : Action::kWrite;
          finished_ = last;
        }
      }
      if (broken_) out_.clear();
      if (action == Action::kNone && has_final_) {
        action = Action::kFinish;
        finished_ = true;
      }
      if (failed_) {
        final_status_ = *failed_;
        code_ = failed_->error_code();
      }
      status = final_status_;
    }
    if (cancel) cancel_->cancel();
    switch (action) {
      case Action::kNone:
        return;
      case Action::kWrite:
        StartWrite(&wire_);
        return;
      case Action::kWriteAndFinish:
        StartWriteAndFinish(&wire_, grpc::WriteOptions(), status);
        return;
      case Action::kFinish:
        Finish(status);
        return;
    }
  }

  GenerationService* svc_;
  grpc::CallbackServerContext* ctx_;
  const int64_t t_arrival_ns_;
  std::shared_ptr<CancelToken> cancel_;
  std::string request_id_;
  bool want_logprobs_ = false;
  // Engine thread only.
  int64_t n_tokens_ = 0;
  int64_t t_last_token_ns_ = 0;

  absl::Mutex mu_;
  std::deque<v1::GenerateResponse> out_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer wire_;  // the message in flight; touched only by pump() while !writing_
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool has_final_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> failed_ ABSL_GUARDED_BY(mu_);  // a response could not be serialized
  int64_t t_write_ns_ ABSL_GUARDED_BY(mu_) = 0;  // when the write in flight started
  bool cut_ ABSL_GUARDED_BY(mu_) = false;          // cut() ran: the client stopped reading
  // Read in OnDone (after Finish, which orders it); written before Finish.
  grpc::StatusCode code_ = grpc::StatusCode::OK;

  std::shared_ptr<GenerateCall> self_;  // released by OnDone
  std::recursive_mutex done_mu_;        // OnDone vs cut(): recursive, as OnDone may run inside cut()'s TryCancel
  bool done_ = false;                   // guarded by done_mu_
};

// ---------------------------------------------------------------------------------------

GenerationService::GenerationService(const ServerConfig& cfg, Metrics* metrics)
    : cfg_(cfg), metrics_(metrics) {
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
  const absl::Duration every = std::min(absl::Seconds(1), absl::Seconds(cfg_.server.write_stall_timeout_s) / 4);
  for (;;) {
    std::vector<std::shared_ptr<GenerateCall>> stalled;
    {
      absl::MutexLock lock(&calls_mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(calls_mu_) { return stop_sweeper_; };
      if (calls_mu_.AwaitWithTimeout(absl::Condition(&stop), every)) return;
      const int64_t now = RealClock::get().now_ns();
      for (auto& [raw, weak] : calls_) {
        if (std::shared_ptr<GenerateCall> c = weak.lock(); c && c->stalled(now, limit_ns)) stalled.push_back(c);
      }
    }
    // Outside calls_mu_: a cut may run the call's OnDone (which unregisters it) on this thread.
    for (const auto& c : stalled) c->cut(static_cast<double>(limit_ns) * 1e-9);
  }
}

void GenerationService::set_engine(std::shared_ptr<Engine> engine) {
  absl::MutexLock lock(&mu_);
  engine_ = std::move(engine);
}

std::shared_ptr<Engine> GenerationService::engine() const {
  absl::MutexLock lock(&mu_);
  return engine_;
}

absl::StatusOr<std::shared_ptr<Engine>> GenerationService::serving_engine() const {
  if (draining_.load(std::memory_order_acquire)) {
    return absl::UnavailableError("server is draining: not accepting new requests");
  }
  std::shared_ptr<Engine> e = engine();
  if (!e) return absl::UnavailableError("model is loading: not ready yet");
  return e;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(grpc::CallbackServerContext* ctx,
                                                                        const grpc::ByteBuffer* request) {
  return GenerateCall::create(this, ctx, *request);
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* request_bytes,
                                                      grpc::ByteBuffer* response_bytes) {
  const int64_t t0 = RealClock::get().now_ns();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto done = [&](const absl::Status& st) {
    grpc::Status gs = to_grpc_status(st);
    metrics_->record_request("Tokenize", gs.error_code(), seconds_since(t0));
    reactor->Finish(gs);
    return reactor;
  };
  if (auth_) {
    if (absl::Status st = auth_->check("/frost.v1.Generation/Tokenize", ctx); !st.ok()) return done(st);
  }
  absl::StatusOr<std::shared_ptr<Engine>> engine = serving_engine();
  if (!engine.ok()) return done(engine.status());
  v1::TokenizeRequest request;
  if (absl::Status st = parse_request(*request_bytes, &request); !st.ok()) return done(st);
  if (absl::Status st = check_text("text", request.text(), cfg_.limits); !st.ok()) return done(st);
  const LoadedModel& model = (*engine)->model();
  if (!model.tokenizer) return done(absl::FailedPreconditionError("the served model has no tokenizer"));
  absl::StatusOr<std::vector<int32_t>> ids =
      model.tokenizer->encode(request.text(), request.has_add_bos() ? request.add_bos() : true);
  if (!ids.ok()) return done(ids.status());
  v1::TokenizeResponse response;
  response.mutable_token_ids()->Assign(ids->begin(), ids->end());
  return done(serialize_response(response, response_bytes));
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* request_bytes,
                                                          grpc::ByteBuffer* response_bytes) {
  const int64_t t0 = RealClock::get().now_ns();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto done = [&](const absl::Status& st) {
    grpc::Status gs = to_grpc_status(st);
    metrics_->record_request("GetModelInfo", gs.error_code(), seconds_since(t0));
    reactor->Finish(gs);
    return reactor;
  };
  if (auth_) {
    if (absl::Status st = auth_->check("/frost.v1.Generation/GetModelInfo", ctx); !st.ok()) return done(st);
  }
  v1::ModelInfoRequest request;
  if (absl::Status st = parse_request(*request_bytes, &request); !st.ok()) return done(st);
  // Model info stays available while draining (it is cheap and helps debugging).
  std::shared_ptr<Engine> e = engine();
  if (!e) return done(absl::UnavailableError("model is loading: not ready yet"));
  v1::ModelInfo response;
  const LoadedModel& m = e->model();
  response.set_name(m.name);
  response.set_architecture(arch_name(m.config.arch));
  response.set_context_length(static_cast<int32_t>(e->max_context()));
  response.set_vocab_size(static_cast<int32_t>(m.config.n_vocab));
  response.set_n_params(m.model->n_params());
  response.set_weight_dtype(weight_dtype_name(m.model->weight_format()));
  const EngineStats st = e->stats();
  response.set_weight_bytes(st.executor.weight_bytes);
  response.set_kernels(kernels::isa_name(kernels::active_isa()));
  response.set_kv_codec(kv_codec_name(cfg_.engine.kv_codec));
  response.set_device(st.executor.device);
  response.set_device_name(st.executor.device_name);
  response.set_device_bytes(st.executor.device_bytes);
  response.set_kv_blocks(st.kv_blocks_total);
  response.set_kv_block_bytes(st.kv_block_bytes);
  response.set_kv_block_tokens(static_cast<int32_t>(st.kv_block_tokens));
  response.set_kv_cache_bytes(st.kv_pool_bytes);
  response.set_max_running(cfg_.engine.max_running);
  response.set_max_batch_tokens(cfg_.engine.max_batch_tokens);
  response.set_prefix_caching(cfg_.engine.prefix_caching);
  return done(serialize_response(response, response_bytes));
}

}  // namespace frost::server
