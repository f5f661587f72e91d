#pragma once
// frost.v1.Generation on the gRPC callback API.
//
// Generate: a ServerWriteReactor per call. The callback thread checks auth and the drain, decodes and
// validates the request at the edge (server/generation_codec.h: to_generation_request) and queues it on the
// service's intake executor; a worker there renders a chat request's messages (server/generation_chat.h) and
// calls Engine::submit, which tokenizes the prompt and runs the checks that need the tokens, and either the
// engine takes the request (its thread then pushes tokens into the reactor through a TokenSink) or the call
// is refused from the worker.
//
// Why an intake executor rather than tokenizing on the engine thread at intake: tokenizing a long prompt
// (limits.max_prompt_bytes) takes milliseconds, and on the engine thread it would delay the step of every
// running sequence (the 32-stream inter-token latency); on a gRPC callback thread it would hold one of gRPC's
// few callback threads, so Health and the start of other streams wait. On the intake workers it delays only
// the request itself. Ordering: the queue is FIFO; with two workers a short prompt may overtake a long one
// that arrived just before it, which no client can observe as a contract (concurrent streams have no order)
// and keeps time to first token of short requests from waiting on a long tokenization. Refusals that need the
// tokens (prompt + max_new_tokens over the context or the KV pool) keep their codes and messages: they come
// from Engine::submit as before, only on another thread. Tokenize runs on the same executor. The
// reactor never blocks: tokens that arrive while a write is in flight are coalesced into the next chunk, so a
// slow reader costs memory proportional to its unread tokens (bounded by max_new_tokens), never engine time.
//
// Cancellation: OnCancel (client cancel, client deadline, broken connection) trips the request's CancelToken;
// the engine computes at most one more token and frees the sequence's KV cache before on_finish. The call's
// deadline is also copied into the CancelToken, so the engine stops on time even before gRPC reports the
// cancellation.
//
// Readiness: until set_engine() every RPC is UNAVAILABLE ("model is loading"); after start_drain() new
// Generate/Tokenize calls are UNAVAILABLE ("server is draining"). GetModelInfo (in-memory) is answered on the
// callback thread (server/unary.h).
//
// Every method is raw (request and responses as grpc::ByteBuffer, parsed and serialized in
// server/proto_codec.h) so that a request protobuf refuses to parse — invalid UTF-8 in a string field, bytes
// that are no message — gets INVALID_ARGUMENT naming the field or the type instead of gRPC's empty
// UNIMPLEMENTED. The wire contract is the
// same: clients use the ordinary generated stubs.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/generate/engine.h"
#include "frost/v1/generation.grpc.pb.h"
#include "server/auth.h"
#include "server/executor.h"
#include "server/generation_chat.h"
#include "server/generation_codec.h"
#include "server/metrics.h"
#include "server/server_config.h"
#include "server/unary.h"

namespace frost::server {

// Every method raw: even GetModelInfo, whose request has no fields, can get bytes that are no message, and
// those must be INVALID_ARGUMENT like everywhere else (not gRPC's empty UNIMPLEMENTED).
using GenerationServiceBase =
    v1::Generation::WithRawCallbackMethod_Generate<v1::Generation::WithRawCallbackMethod_Tokenize<
        v1::Generation::WithRawCallbackMethod_GetModelInfo<
            v1::Generation::WithRawCallbackMethod_Embed<v1::Generation::Service>>>>;

class GenerationService final : public GenerationServiceBase {
 public:
  // `metrics` must outlive the service.
  GenerationService(const ServerConfig& cfg, Metrics* metrics);
  ~GenerationService() override;  // stops the stall sweeper

  // The engine to serve with (after the model loaded and warmed up); nullptr = not ready. `prompts`: the
  // served model's chat prompt (server/openai_render.h), shared with the OpenAI endpoint so both render chat
  // with one ChatPrompt; null: made here from the engine's model and model.chat_template.
  void set_engine(std::shared_ptr<Engine> engine,
                  std::shared_ptr<const openai::PromptSource> prompts = nullptr);
  // Checks every call against `auth` (must outlive the service); nullptr = no checks.
  void set_authenticator(const Authenticator* auth) { auth_ = auth; }
  std::shared_ptr<Engine> engine() const;
  // New calls get UNAVAILABLE from now on; calls in flight continue.
  void start_drain() { draining_.store(true, std::memory_order_release); }
  // Live Generate reactors (constructed, not yet done).
  int64_t active_streams() const { return active_streams_.load(std::memory_order_acquire); }
  // Streams cut because their client stopped reading (server.write_stall_timeout_s).
  int64_t write_stalls() const { return write_stalls_.load(std::memory_order_acquire); }

  // Serialized frost.v1.GenerateRequest in, serialized frost.v1.GenerateResponse messages out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  // Serialized frost.v1.TokenizeRequest in, frost.v1.TokenizeResponse out.
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // Serialized frost.v1.ModelInfoRequest in, frost.v1.ModelInfo out.
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  // Serialized frost.v1.EmbedRequest in, frost.v1.EmbedResponse out (server/embed_exec.h; on embed_).
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;

 private:
  class GenerateCall;

  // Auth, the drain flag and the metrics of this service's calls (server/unary.h); Mode::kExecutor runs on
  // the intake executor.
  UnaryServer unary_server();
  // The served model's prompt source (chat); null while loading.
  std::shared_ptr<const openai::PromptSource> prompts() const;
  // OK with the engine, or UNAVAILABLE while loading.
  absl::StatusOr<std::shared_ptr<Engine>> serving_engine() const;
  // The stall sweeper: every live Generate stream is registered (weak) from its construction to its OnDone;
  // a thread cuts the ones whose pending write is older than server.write_stall_timeout_s.
  void register_call(const std::shared_ptr<GenerateCall>& call);
  void unregister_call(GenerateCall* call);
  void sweep_loop();

  ServerConfig cfg_;
  Metrics* metrics_;
  const Authenticator* auth_ = nullptr;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> active_streams_{0};
  std::atomic<int64_t> write_stalls_{0};
  mutable absl::Mutex mu_;
  std::shared_ptr<Engine> engine_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const openai::PromptSource> prompts_ ABSL_GUARDED_BY(mu_);
  absl::Mutex calls_mu_;  // before any call's own mutex
  std::unordered_map<GenerateCall*, std::weak_ptr<GenerateCall>> calls_ ABSL_GUARDED_BY(calls_mu_);
  bool stop_sweeper_ ABSL_GUARDED_BY(calls_mu_) = false;
  std::thread sweeper_;
  // Where Embed's backbone forwards run: its own threads (prediction.threads, model.threads intra-op each)
  // and queue (prediction.max_queued), so embeddings never hold the intake workers.
  Executor embed_;
  // Where Engine::submit (tokenization) and Tokenize run. Declared last: destroyed (queued calls answered,
  // workers joined) before anything they use.
  Executor intake_;
};

}  // namespace frost::server
