#pragma once
// The OpenAI-compatible HTTP API (server.http.listen): POST /v1/completions, POST /v1/chat/completions,
// GET /v1/models, GET /health. Bodies are mapped in server/openai_api.h; this is the transport.
//
// Library: cpp-httplib from Debian (libcpp-httplib0.11, built there with OpenSSL): a maintained HTTP/1.1
// server with chunked responses, a bounded thread pool, body size and read-time limits, and TLS through an
// SSL_CTX we configure ourselves (so the certificate rotation of server/tls.h reaches it). Not civetweb,
// which prometheus-cpp already brings: Debian 12's civetweb crashes on its first TLS request
// (server/metrics_https.h).
//
// What it shares with gRPC: the bearer tokens (Authorization: Bearer, the inference rule of server/auth.h),
// the TLS identity and its rotation (with server.tls the port speaks HTTPS only; a new certificate serves the
// next connection), the engine's admission limits (429 when full), limits.*, metrics (frost_requests_total
// {protocol="http"}, frost_generations_total, time to first token), and drain (new requests 503; streams in
// flight run until the engine's drain deadline, then end).
//
// Streaming: `stream: true` answers server-sent events, one `data: {chunk}` per batch of tokens (tokens that
// arrive while a write is in flight are coalesced, like Generate), then `data: [DONE]`. Both streamed and
// whole responses are written from a chunked content provider that waits for the engine's events and checks
// the connection every kPollMs: a client that disconnects has its request cancelled, and the engine frees
// its KV within one step.
//
// Threads: one accept thread and a pool of server.http.max_connections workers (cpp-httplib's); a worker
// holds a connection while it waits for its tokens, never engine time (the engine's delivery thread only
// queues events).
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/generate/engine.h"
#include "core/model/chat_template.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/metrics_https.h"
#include "server/server_config.h"
#include "server/tls.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

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

  int port() const { return port_; }
  // The engine to serve with, after the model is warm; loads the chat template (model.chat_template or the
  // model's own). A template that does not parse leaves chat refused (400 with the reason); completions serve.
  void set_engine(std::shared_ptr<Engine> engine);
  // New requests get 503 from now on; responses in flight continue.
  void start_drain() { draining_.store(true, std::memory_order_release); }
  // Stops accepting and joins every thread (responses in flight end when their engine requests do). Idempotent.
  void stop();
  // Responses being written now.
  int64_t active() const { return active_.load(std::memory_order_acquire); }
  // Why chat is refused ("" = it is served).
  std::string chat_unavailable_reason() const;

 private:
  struct Served;  // the engine and what goes with it
  OpenAiHttpServer(const ServerConfig& cfg, Metrics* metrics, const Authenticator* auth, TlsReloader* tls);
  void routes();
  void handle_generate(int endpoint, const httplib::Request& req, httplib::Response& res);
  void handle_models(const httplib::Request& req, httplib::Response& res);
  std::shared_ptr<const Served> served() const;
  absl::StatusOr<std::shared_ptr<HttpsMetricsServer::Ctx>> tls_context();

  ServerConfig cfg_;
  Metrics* metrics_;
  const Authenticator* auth_;
  TlsReloader* tls_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> active_{0};
  std::atomic<uint64_t> next_id_{0};
  mutable absl::Mutex mu_;
  std::shared_ptr<const Served> served_ ABSL_GUARDED_BY(mu_);
  bool stopped_ = false;
  absl::Mutex tls_mu_;
  std::shared_ptr<HttpsMetricsServer::Ctx> tls_ctx_ ABSL_GUARDED_BY(tls_mu_);
  uint64_t tls_ctx_generation_ ABSL_GUARDED_BY(tls_mu_) = 0;
};

// Encodes `text` with the tokenizer, mapping every occurrence of a special token's text ("<|im_start|>",
// "<s>") to that token's id as Hugging Face does for a chat template's rendering.
std::vector<int32_t> encode_with_special_tokens(const Tokenizer& tok, const std::string& text,
                                                const std::vector<std::pair<std::string, int32_t>>& specials);

}  // namespace frost::server
