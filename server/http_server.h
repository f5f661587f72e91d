#pragma once
// The OpenAI-compatible HTTP API (server.http.listen): POST /v1/completions, POST /v1/chat/completions,
// GET /v1/models, GET /health. Bodies are mapped in server/openai_api.h; this is the transport.
//
// Transport: frostd's own HTTP/1.1 front (server/http_front.h), the server /metrics runs on too: every limit
// of server.http (connections in all and per address, head size and deadline, body size — declared, chunked
// or inflated — and deadline) is enforced before the bytes it bounds are read, and each refusal is answered
// with OpenAI's error object (400 / 413 / 415 / 417 / 431 / 501 / 505) or the connection is cut (caps,
// timeouts), counted in frost_http_refused_total{reason}. Keep-alive, pipelined requests answered in order.
//
// What it shares with gRPC: the bearer tokens (Authorization: Bearer, the inference rule of server/auth.h),
// the TLS identity and its rotation (with server.tls the port speaks HTTPS only; a new certificate serves the
// next connection), the engine's admission limits (429 when full), limits.*, metrics (frost_requests_total
// {protocol="http"}, frost_generations_total, time to first token), and drain (new requests 503; streams in
// flight run until the engine's drain deadline, then end).
//
// Streaming: `stream: true` answers server-sent events (chunked), one `data: {chunk}` per batch of tokens
// (tokens that arrive while a write is in flight are coalesced, like Generate), then `data: [DONE]`. A whole
// response is written once every choice has finished. While it waits for the engine's events the handler
// checks the connection every kPollMs (HttpResponse::client_gone()): a client that disconnects has its
// request cancelled, and the engine frees its KV within one step.
//
// Threads: the front's accept thread and a thread per connection (at most server.http.max_connections); a
// connection's thread holds it while it waits for its tokens, never engine time (the engine's delivery thread
// only queues events).
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/generate/engine.h"
#include "core/model/chat_template.h"
#include "server/auth.h"
#include "server/http_front.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/openai_render.h"
#include "server/server_config.h"
#include "server/tls.h"

namespace frost::server {

class OpenAiHttpServer {
 public:
  static constexpr int kPollMs = 20;

  // Binds server.http.listen (port 0: a free one). `metrics`, `auth` and `tls` (null: plaintext) must outlive the
  // server. UNAVAILABLE naming server.http.listen when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> start(const ServerConfig& cfg, Metrics* metrics,
                                                                 const Authenticator* auth, TlsReloader* tls);
  ~OpenAiHttpServer();  // stop()
  OpenAiHttpServer(const OpenAiHttpServer&) = delete;
  OpenAiHttpServer& operator=(const OpenAiHttpServer&) = delete;

  int port() const { return front_->port(); }
  // The engine to serve with, after the model is warm; loads the chat template (model.chat_template or the
  // model's own). A template that does not parse leaves chat refused (400 with the reason); completions
  // serve. `prompts`: the served model's prompt source, shared with gRPC Generate (one ChatPrompt per served
  // model); null: made here.
  void set_engine(std::shared_ptr<Engine> engine,
                  std::shared_ptr<const openai::PromptSource> prompts = nullptr);
  // New requests get 503 from now on; responses in flight continue.
  void start_drain() { draining_.store(true, std::memory_order_release); }
  // Stops accepting and joins every thread (responses in flight end when their engine requests do). Idempotent.
  void stop();
  // Responses being written now.
  int64_t active() const { return active_.load(std::memory_order_acquire); }
  // Why chat is refused ("" = it is served).
  std::string chat_unavailable_reason() const;

 private:
  struct Served;     // the engine and what goes with it
  struct Submitted;  // one submitted request: its engine exchange and how to answer it
  OpenAiHttpServer(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth)
      : cfg_(cfg), metrics_(metrics), auth_(auth) {}
  std::vector<HttpRoute> routes();
  void handle_models(const HttpRequest& req, HttpResponse& res);
  void handle_health(const HttpRequest& req, HttpResponse& res);
  void handle_generate(openai::Endpoint ep, const HttpRequest& req, HttpResponse& res);
  // /tokenize, /detokenize and the render endpoints (server/http_utility.cc); `route` is "tokenize",
  // "detokenize", "completions" or "chat".
  void handle_utility(const std::string& route, const HttpRequest& req, HttpResponse& res);
  std::variant<nlohmann::json, openai::ApiError> utility_answer(const std::string& route, const HttpRequest& req);
  void handle_embeddings(const HttpRequest& req, HttpResponse& res);  // server/http_embeddings.cc
  // POST /v1/responses (server/http_responses.cc).
  void handle_responses(const HttpRequest& req, HttpResponse& res);
  // Parses, checks (auth, drain, model, template, limits) and submits one request: what to stream, or the
  // error to answer. Every choice is submitted or none stays running.
  std::variant<Submitted, openai::ApiError> parse_and_submit(openai::Endpoint ep, const HttpRequest& req,
                                                             int64_t t0_ns);
  // Submits a parsed request (model and auth checked) to `served`'s engine: every choice, or none.
  std::variant<Submitted, openai::ApiError> submit(openai::ParsedRequest p, const std::shared_ptr<const Served>& served,
                                                   int64_t t0_ns);
  // Answers a submitted request: SSE chunks as events arrive, or the whole body once every choice finished.
  // Returns when the answer is written to its end (OK, or the engine's error code) or the client went
  // (CANCELLED: the caller cancels the engine requests).
  grpc::StatusCode stream_response(const Submitted& sub, HttpResponse& res);
  // A streamed chat choice with tools: its chunks for one batch of events (openai_chat.h).
  static std::string tool_chunks(const Submitted& sub, int i, const std::vector<TokenEvent>& events, bool first,
                                 const std::optional<FinishReason>& fin, const openai::TokenText& token_text);
  // Waits until every choice is queued by the engine or refused (a constraint compiles on the engine's
  // compiler, never on this thread; the status line depends on its outcome), polling the connection every
  // kPollMs: the refusal to answer, or nullopt (admitted, or *gone when the client left first).
  std::optional<openai::ApiError> await_admission(const Submitted& sub, HttpResponse& res, bool* gone);
  std::shared_ptr<const Served> served() const;
  // The served model for a request, checked first: the bearer token under the inference rule (`method`: the
  // gRPC call the endpoint mirrors; nullptr: none, for an endpoint the config opens), then 503 while draining
  // (when `refuse_while_draining`) or while the model loads.
  std::variant<std::shared_ptr<const Served>, openai::ApiError> serving(
      const HttpRequest& req, bool refuse_while_draining,
      const char* method = "/frost.v1.Generation/Generate") const;

  ServerConfig cfg_;
  Metrics* metrics_;
  const Authenticator* auth_;
  std::unique_ptr<HttpFront> front_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> active_{0};
  std::atomic<uint64_t> next_id_{0};
  mutable absl::Mutex mu_;
  std::shared_ptr<const Served> served_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost::server
