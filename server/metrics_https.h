#pragma once
// /metrics over HTTP or HTTPS: frostd's own small HTTP/1.1 server (plain sockets, or OpenSSL with
// server.tls.metrics) that answers GET /metrics (or /) with Metrics::render() and nothing else. Both the
// plaintext and the TLS endpoint are this class (the file keeps its old name; HttpsMetricsServer is an
// alias).
//
// Why not prometheus-cpp's Exposer (civetweb): its few workers each block on one client's reads, so two
// connections that trickle a request head a byte a second kept every scrape waiting (issue 42: Prometheus
// marks the target down and every alert on it goes blind), and Debian 12's civetweb loads OpenSSL with dlopen
// and calls a NULL OpenSSL 3 function pointer on its first TLS request. prometheus-cpp's core (the registry
// and text serializer) is still what renders the exposition.
//
// Hostile or broken clients are bounded so that they cannot starve a scraper (defaults; Limits below):
//   - one accept thread that never reads from a client; a thread per accepted connection;
//   - a deadline for the whole request head, TLS handshake included (kHeadDeadlineS from accept; every wait
//     polls with the time left, so trickling a byte at a time does not extend it), then the connection is
//     cut;
//   - a request head of at most kMaxRequestHead bytes (431 beyond), one request per connection
//     (Connection: close), a deadline for writing the whole response (kWriteDeadlineS);
//   - at most kMaxConnectionsPerAddress connections at once from one client address (IPv4-mapped IPv6 counts
//   as
//     its IPv4 address) and kMaxConnections in all. A connection over a cap displaces the oldest connection
//     that is still reading its head (from the same address for the per-address cap; from the address holding
//     the most connections for the global one) — so a scraper sharing an address with a trickling client
//     still gets in, and the trickler is what is cut — and is itself closed at once only when every
//     connection it competes with is already past its head (answering, bounded by the write deadline).
// Every connection closed without an answer is counted through Options::on_refused with a reason:
// "address_limit", "connection_limit", "head_timeout", "write_timeout" or "tls_handshake" (Metrics exports
// them as frost_metrics_connections_refused_total{reason}). Nothing is logged per connection above DEBUG.
//
// With TLS it serves the certificate that TlsReloader staged for gRPC (the same rotation: a valid new pair is
// used by the next connection, a refused one never), and with server.tls.client_ca_file it asks for (and with
// require_client_cert requires) a client certificate from that CA, like the gRPC port. Anything but GET /
// HEAD of /metrics (or /) gets 404 / 405 / 400.
#include <openssl/ssl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/tls.h"

namespace frost::server {

// The bounds. frostd uses these defaults (no config keys); tests scale them down.
inline constexpr int kMetricsMaxConnections = 64;           // connections at once, all addresses
inline constexpr int kMetricsMaxConnectionsPerAddress = 4;  // connections at once from one client address
inline constexpr double kMetricsHeadDeadlineS =
    5;  // accept → end of the request head, TLS handshake included
inline constexpr double kMetricsWriteDeadlineS = 10;    // the whole response
inline constexpr size_t kMetricsMaxRequestHead = 8192;  // bytes of request line + headers

struct MetricsHttpLimits {
  int max_connections = kMetricsMaxConnections;
  int max_connections_per_address = kMetricsMaxConnectionsPerAddress;
  double head_deadline_s = kMetricsHeadDeadlineS;
  double write_deadline_s = kMetricsWriteDeadlineS;
  size_t max_request_head = kMetricsMaxRequestHead;
};

struct MetricsHttpOptions {
  MetricsHttpLimits limits;
  // Called (from the server's threads) once per connection closed without an answer; `reason` is one of
  // the string literals listed above.
  std::function<void(const char* reason)> on_refused;
};

class MetricsHttpServer {
 public:
  using Limits = MetricsHttpLimits;
  using Options = MetricsHttpOptions;
  static constexpr int kMaxConnections = kMetricsMaxConnections;
  static constexpr int kMaxConnectionsPerAddress = kMetricsMaxConnectionsPerAddress;
  static constexpr double kHeadDeadlineS = kMetricsHeadDeadlineS;
  static constexpr double kWriteDeadlineS = kMetricsWriteDeadlineS;
  static constexpr size_t kMaxRequestHead = kMetricsMaxRequestHead;

  // Listens on HOST:PORT (port 0: a free one) and serves `render()`; over TLS with the identity `tls` has
  // staged when `tls` is not null (`tls` outlives the server), else plaintext. INVALID_ARGUMENT / UNAVAILABLE
  // naming server.metrics_listen when it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> start(const std::string& listen, TlsReloader* tls,
                                                                  std::function<std::string()> render,
                                                                  Options options = Options());
  ~MetricsHttpServer();  // stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  // The SSL_CTX of one staged identity.
  struct Ctx {
    SSL_CTX* ctx = nullptr;
    ~Ctx();
  };
  // Stops accepting, cuts connections being served and joins every thread. Idempotent.
  void stop();

  // Requests answered with 200, TLS handshakes that failed, connections closed without an answer (all
  // reasons) and connections open now (for tests and logs).
  int64_t served() const { return served_.load(); }
  int64_t handshake_failures() const { return handshake_failures_.load(); }
  int64_t refused() const { return refused_.load(); }
  int open_connections();

 private:
  struct Conn {
    int fd = -1;
    std::string address;     // the client's IP address, the per-address key
    bool in_head = true;     // still reading its request head (TLS handshake included): may be displaced
    bool displaced = false;  // cut to make room for a newer connection (counted then)
    std::thread thread;
  };
  using ConnList = std::list<Conn>;

  MetricsHttpServer(TlsReloader* tls, std::function<std::string()> render, Options options)
      : tls_(tls), render_(std::move(render)), options_(std::move(options)) {}
  void accept_loop();
  // Admits `fd` from `address` within the caps (displacing a connection still in its head when over one);
  // false when it must be closed at once. Called with mu_ held.
  bool admit(const std::string& address, const char** reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void serve_connection(ConnList::iterator conn);
  // Marks `conn` past its head (it can no longer be displaced); false when it was displaced meanwhile.
  bool finish_head(ConnList::iterator conn);
  void refuse(const char* reason);
  // The SSL_CTX for the identity staged now (rebuilt when TlsReloader staged a new one).
  absl::StatusOr<std::shared_ptr<Ctx>> context();

  TlsReloader* tls_;
  std::function<std::string()> render_;
  Options options_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: stop() writes, the accept loop's poll() returns
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> served_{0}, handshake_failures_{0}, refused_{0};
  std::atomic<uint64_t> ctx_error_logged_{
      ~uint64_t{0}};  // the identity generation whose SSL_CTX error was logged

  absl::Mutex mu_;
  std::shared_ptr<Ctx> ctx_ ABSL_GUARDED_BY(mu_);
  uint64_t ctx_generation_ ABSL_GUARDED_BY(mu_) = 0;
  ConnList conns_ ABSL_GUARDED_BY(mu_);                          // connections being served, oldest first
  std::map<std::string, int> per_address_ ABSL_GUARDED_BY(mu_);  // address → entries of conns_
  std::vector<std::thread> finished_
      ABSL_GUARDED_BY(mu_);  // threads of ended connections, joined by the acceptor
};

// The name the TLS endpoint had (server/http_server.h uses its Ctx).
using HttpsMetricsServer = MetricsHttpServer;

// An SSL_CTX serving the staged identity `id` (TLS 1.2+, its chain and key, client verification as
// configured): what this server and the OpenAI HTTP API (server/http_server.h) hand each new connection.
absl::StatusOr<std::shared_ptr<MetricsHttpServer::Ctx>> build_tls_server_ctx(const TlsReloader::Staged& id);

}  // namespace frost::server
