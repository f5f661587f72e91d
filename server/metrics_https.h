#pragma once
// /metrics over HTTPS (server.tls.metrics): a small HTTP/1.1 server on OpenSSL that answers GET /metrics with
// Metrics::render() and nothing else.
//
// Why not prometheus-cpp's Exposer with TLS: Debian 12's civetweb (under the Exposer) loads OpenSSL with
// dlopen and calls a NULL OpenSSL 3 function pointer on its first TLS request (a worker SIGSEGV, seen in
// frostd), so the plaintext endpoint stays on civetweb and the TLS one is this.
//
// It serves the certificate that TlsReloader staged for gRPC (the same rotation: a valid new pair is used by
// the next connection, a refused one never), and with server.tls.client_ca_file it asks for (and with
// require_client_cert requires) a client certificate from that CA, like the gRPC port. Bounds, so a scraper
// that misbehaves costs little: one accept thread, at most kMaxConnections connections served at once (more
// are closed at once), kIoTimeoutS per read / write, a request head of at most 8 KiB, one request per
// connection (Connection: close). Anything but GET /metrics (or /) gets 404 / 405 / 400.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <openssl/ssl.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/tls.h"

namespace frost::server {



class HttpsMetricsServer {
 public:
  static constexpr int kMaxConnections = 4;
  static constexpr int kIoTimeoutS = 10;

  // Listens on HOST:PORT (port 0: a free one) and serves `render()` with the identity `tls` has staged
  // (`tls` outlives the server). INVALID_ARGUMENT / UNAVAILABLE naming server.metrics_listen when it cannot.
  static absl::StatusOr<std::unique_ptr<HttpsMetricsServer>> start(const std::string& listen,
                                                                   TlsReloader* tls,
                                                                   std::function<std::string()> render);
  ~HttpsMetricsServer();  // stop()
  HttpsMetricsServer(const HttpsMetricsServer&) = delete;
  HttpsMetricsServer& operator=(const HttpsMetricsServer&) = delete;

  int port() const { return port_; }
  // The SSL_CTX of one staged identity.
  struct Ctx {
    SSL_CTX* ctx = nullptr;
    ~Ctx();
  };
  // Stops accepting, cuts connections being served and joins every thread. Idempotent.
  void stop();

  // Connections served and handshakes that failed (for tests and logs).
  int64_t served() const { return served_.load(); }
  int64_t handshake_failures() const { return handshake_failures_.load(); }

 private:
  HttpsMetricsServer(TlsReloader* tls, std::function<std::string()> render)
      : tls_(tls), render_(std::move(render)) {}
  void accept_loop();
  void serve_connection(int fd);
  // The SSL_CTX for the identity staged now (rebuilt when TlsReloader staged a new one).
  absl::StatusOr<std::shared_ptr<Ctx>> context();

  TlsReloader* tls_;
  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: stop() writes, the accept loop's poll() returns
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> served_{0}, handshake_failures_{0};

  absl::Mutex mu_;
  std::shared_ptr<Ctx> ctx_ ABSL_GUARDED_BY(mu_);
  uint64_t ctx_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> active_fds_ ABSL_GUARDED_BY(mu_);  // connections being served (stop() shuts them down)
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);  // one per connection, joined when done or at stop
  std::vector<std::thread::id> finished_ ABSL_GUARDED_BY(mu_);
};

// An SSL_CTX serving the staged identity `id` (TLS 1.2+, its chain and key, client verification as configured):
// what this server and the OpenAI HTTP API (server/http_server.h) hand each new connection.
absl::StatusOr<std::shared_ptr<HttpsMetricsServer::Ctx>> build_tls_server_ctx(const TlsReloader::Staged& id);

}  // namespace frost::server
