#pragma once
// frost.v1.Generation on the gRPC callback API.
//
// Generate: a ServerWriteReactor per call. The request is validated at the edge (to_generation_request), then
// submitted to the Engine, whose worker thread pushes tokens into the reactor through a TokenSink. The
// reactor never blocks: tokens that arrive while a write is in flight are coalesced into the next chunk, so a
// slow reader costs memory proportional to its unread tokens (bounded by max_new_tokens), never engine time.
//
// Cancellation: OnCancel (client cancel, client deadline, broken connection) trips the request's CancelToken;
// the engine computes at most one more token and frees the sequence's KV cache before on_finish. The call's
// deadline is also copied into the CancelToken, so the engine stops on time even before gRPC reports the
// cancellation.
//
// Readiness: until set_engine() every RPC is UNAVAILABLE ("model is loading"); after start_drain() new
// Generate/Tokenize calls are UNAVAILABLE ("server is draining").
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
#include "server/metrics.h"
#include "server/server_config.h"

namespace frost::server {

// Longest request_id accepted, in bytes.
inline constexpr size_t kMaxRequestIdBytes = 128;
// Most token ids in a token_ids prompt, whatever the config (limits.max_prompt_tokens, when set, is lower;
// the engine then refuses what does not fit the context).
inline constexpr int kMaxPromptTokenIds = 1 << 20;

// Edge validation and conversion of a GenerateRequest: the checks that need no model (prompt presence, byte
// limit, UTF-8, request_id, logprobs sign, KV codec name), then the proto's optional fields over the engine
// defaults. Sampling ranges, token limits and the context check run in Engine::submit (still before any model
// work). INVALID_ARGUMENT names the proto field and the value.
absl::StatusOr<GenerationRequest> to_generation_request(const v1::GenerateRequest& req,
                                                        const LimitsSection& limits);

// Every method raw: even GetModelInfo, whose request has no fields, can get bytes that are no message, and
// those must be INVALID_ARGUMENT like everywhere else (not gRPC's empty UNIMPLEMENTED).
using GenerationServiceBase =
    v1::Generation::WithRawCallbackMethod_Generate<v1::Generation::WithRawCallbackMethod_Tokenize<
        v1::Generation::WithRawCallbackMethod_GetModelInfo<v1::Generation::Service>>>;

class GenerationService final : public GenerationServiceBase {
 public:
  // `metrics` must outlive the service.
  GenerationService(const ServerConfig& cfg, Metrics* metrics);
  ~GenerationService() override;  // stops the stall sweeper

  // The engine to serve with (after the model loaded and warmed up); nullptr = not ready.
  void set_engine(std::shared_ptr<Engine> engine);
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

 private:
  class GenerateCall;

  // OK with the engine, or UNAVAILABLE while loading / draining.
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
  absl::Mutex calls_mu_;  // before any call's own mutex
  std::unordered_map<GenerateCall*, std::weak_ptr<GenerateCall>> calls_ ABSL_GUARDED_BY(calls_mu_);
  bool stop_sweeper_ ABSL_GUARDED_BY(calls_mu_) = false;
  std::thread sweeper_;
};

}  // namespace frost::server
