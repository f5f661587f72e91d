#pragma once
// /metrics over HTTP or HTTPS: an HttpFront (server/http_front.h, frostd's one HTTP/1.1 server) with one
// route, GET / HEAD of /metrics (or /), answered with Metrics::render(). Both the plaintext and the TLS
// endpoint are this class (the file keeps its old name; HttpsMetricsServer is an alias).
//
// Why not prometheus-cpp's Exposer (civetweb): its few workers each block on one client's reads, so two
// connections that trickle a request head a byte a second kept every scrape waiting (issue 42: Prometheus
// marks the target down and every alert on it goes blind), and Debian 12's civetweb loads OpenSSL with dlopen
// and calls a NULL OpenSSL 3 function pointer on its first TLS request. prometheus-cpp's core (the registry
// and text serializer) is still what renders the exposition.
//
// Hostile or broken clients are bounded by the front (defaults; Limits below) so that they cannot starve a
// scraper:
//   - one accept thread that never reads from a client; a thread per accepted connection;
//   - a deadline for the whole request head, TLS handshake included (kHeadDeadlineS from accept; every wait
//     polls with the time left, so trickling a byte at a time does not extend it), then the connection is
//     cut;
//   - a request head of at most kMaxRequestHead bytes (431 beyond), one request per connection
//     (Connection: close), a deadline for writing the whole response (kWriteDeadlineS);
//   - at most kMaxConnectionsPerAddress connections at once from one client address (IPv4-mapped IPv6 counts
//     as its IPv4 address) and kMaxConnections in all. A connection over a cap displaces the oldest
//     connection that is still reading its request (from the same address for the per-address cap; from the
//     address holding the most connections for the global one) — so a scraper sharing an address with a
//     trickling client still gets in, and the trickler is what is cut — and is itself closed at once only
//     when every connection it competes with is already being answered (bounded by the write deadline).
// Every connection closed without an answer is counted through Options::on_refused with a reason:
// "address_limit", "connection_limit", "head_timeout", "body_timeout", "write_timeout" or "tls_handshake"
// (Metrics exports them as frost_metrics_connections_refused_total{reason}); requests the front answers with
// an error (400, 431, ...) are not. Nothing is logged per connection above DEBUG.
//
// With TLS it serves the certificate that TlsReloader staged for gRPC (the same rotation: a valid new pair is
// used by the next connection, a refused one never), and with server.tls.client_ca_file it asks for (and with
// require_client_cert requires) a client certificate from that CA, like the gRPC port. Anything but GET /
// HEAD of /metrics (or /) gets 404 / 405 / 400, with a text body that says why.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/http_front.h"
#include "server/tls.h"

namespace frost::server {

// The bounds. frostd uses these defaults (no config keys); tests scale them down.
inline constexpr int kMetricsMaxConnections = 64;           // connections at once, all addresses
inline constexpr int kMetricsMaxConnectionsPerAddress = 4;  // connections at once from one client address
inline constexpr double kMetricsHeadDeadlineS = 5;      // accept → end of the head, TLS handshake included
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

  int port() const { return front_->port(); }
  // Stops accepting, cuts connections being served and joins every thread. Idempotent.
  void stop() { front_->stop(); }

  // Requests answered with 200, TLS handshakes that failed, connections closed without an answer (all
  // reasons) and connections open now (for tests and logs).
  int64_t served() const { return served_.load(); }
  int64_t handshake_failures() const { return front_->handshake_failures(); }
  int64_t refused() const { return front_->refused(); }
  int open_connections() { return front_->open_connections(); }

 private:
  explicit MetricsHttpServer(std::function<std::string()> render) : render_(std::move(render)) {}
  void answer(const HttpRequest& req, HttpResponse& res);

  std::function<std::string()> render_;
  std::atomic<int64_t> served_{0};
  std::unique_ptr<HttpFront> front_;
};

// The name the TLS endpoint had.
using HttpsMetricsServer = MetricsHttpServer;

}  // namespace frost::server
