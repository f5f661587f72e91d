#pragma once
// HttpFront: frostd's one HTTP/1.1 server, under both the OpenAI API (server/http_server.h) and /metrics
// (server/metrics_https.h). Plain sockets or OpenSSL TLS (the identity server/tls.h stages for gRPC, with its
// rotation: a valid new certificate serves the next connection), one accept thread that never reads from a
// client, and a thread per connection that reads requests, calls the route's handler and writes its answer.
//
// Why our own: every limit is enforced before the bytes it bounds are read (issue 48 — Debian's cpp-httplib
// read chunked and gzip bodies whole past its body limit, buffered any head, had no head deadline and no
// per-address cap, and its worker pool was starved by slow heads and by bodies that never came), and one
// stack serves the API and /metrics.
//
// The bounds (Limits; frostd's API port sets them from server.http, /metrics keeps the defaults of
// metrics_https.h):
//   - request head: request line (414), head bytes and header fields (431) — never more than the head limit
//     is buffered; RFC 9112 framing (server/http_wire.h: obs-fold, whitespace before a colon, bad request
//     line or version, conflicting Content-Length, Transfer-Encoding with Content-Length, chunked not last,
//     ... 400 / 501 / 505);
//   - body: a declared Content-Length over max_body_bytes gets 413 without a byte of it read (with
//     Expect: 100-continue, 413 instead of 100 Continue; 100 Continue only for a request that will be read,
//     417 for another expectation); chunked bodies decoded as they arrive and refused (413) as soon as the
//     total passes the limit; gzip / deflate inflated a block at a time and refused (413) as soon as the
//     inflated size passes it; other content codings 415;
//   - deadlines: the whole head within head_timeout_s (from accept for the first request, TLS handshake
//     included; from its first byte for the next ones) — trickling never extends it, every wait polls with
//     the time left; the whole body within body_timeout_s; idle_timeout_s between keep-alive requests; each
//     response write within write_timeout_s;
//   - connections: at most max_connections in all and max_connections_per_address from one client address
//     (IPv4-mapped IPv6 counts as IPv4). A new connection over a cap displaces one that is not being answered
//     (reading its head or body, idle between requests, or lingering after a refusal): a lingering one first,
//     else the one that has read no byte for longest (a new connection counts from 100 ms after its accept,
//     so a burst cannot displace a request its thread has not read yet) — from the same address for the per-address cap, from
//     the address holding the most connections for the global one — and is itself closed at once only when
//     every competitor is being answered. So a client sharing an address with trickling ones still gets in,
//     the tricklers are what is cut, and a request arriving right now is not what a burst displaces.
// Keep-alive (HTTP/1.1 unless Connection: close; never on HTTP/1.0) with pipelined requests answered in order
// (bytes read past one request stay buffered for the next). After any refusal the front answers with a
// message saying what was wrong (Options::error_body: OpenAI's error object on the API port, text on
// /metrics) and Connection: close, then drains what the client still sends for at most linger_s before it
// closes (so the client reads the answer instead of a reset).
//
// Every refusal is counted through Options::on_refused with a reason: closed without an answer —
// "address_limit", "connection_limit", "head_timeout", "body_timeout", "write_timeout", "tls_handshake" —
// or answered by the front — "bad_request", "uri_too_long", "head_too_large", "body_too_large",
// "unsupported_encoding", "expectation_failed", "not_implemented" (refusal_answered() tells them apart).
// Nothing is logged per connection above DEBUG.
//
// Threads: handlers run on their connection's thread and may block (the OpenAI handler waits for engine
// events); they poll HttpResponse::client_gone() while they wait. stop() cuts every connection (their
// client_gone() turns true) and joins every thread.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/http_io.h"
#include "server/http_wire.h"
#include "server/tls.h"

namespace frost::server {

struct HttpFrontLimits {
  int max_connections = 256;             // connections at once, all addresses
  int max_connections_per_address = 128;  // connections at once from one client address
  size_t max_request_line = 8192;        // bytes (414 beyond)
  size_t max_head_bytes = 16384;         // request line + header fields (431 beyond); trailers count too
  int max_headers = 100;                 // header fields (431 beyond)
  uint64_t max_body_bytes = 1 << 20;     // on the wire and inflated (413 beyond)
  double head_timeout_s = 10;            // the whole request head (TLS handshake included for the first)
  double body_timeout_s = 30;            // the whole body, from the end of the head
  double idle_timeout_s = 5;    // keep-alive: from the end of one answer to the next request's first byte
  double write_timeout_s = 30;  // each write of an answer (a whole response, or one streamed chunk)
  double linger_s = 2;          // after a refusal: draining what the client still sends, at most
  bool keep_alive = true;       // false: one request per connection (Connection: close)
};

// One request, as the handler sees it (the body decoded: de-chunked and inflated).
struct HttpRequest {
  std::string method;
  std::string path;   // without the query
  std::string query;  // after '?'
  int minor = 1;      // HTTP/1.<minor>
  std::vector<http::Header> headers;
  std::string body;
  std::string peer;  // the client's IP address
  // The first header named `name` (case-insensitive), or null.
  const std::string* header(std::string_view name) const;
};

class HttpFront;
class HttpConnection;  // one connection's request loop (server/http_front_conn.cc)

// The answer to one request: either send() once, or start() + write()* + finish() (chunked transfer coding;
// close-delimited for an HTTP/1.0 client). Each returns false once the connection is broken (the client went
// away, or a write missed its deadline): the handler should stop then. A HEAD request gets the head only.
// Used on the handler's thread only.
class HttpResponse {
 public:
  using Headers = std::vector<http::Header>;
  bool send(int status, std::string_view content_type, std::string_view body, const Headers& extra = {});
  bool start(int status, std::string_view content_type, const Headers& extra = {});
  bool write(std::string_view bytes);
  bool finish();
  // Whether the client has gone (closed, reset, or shut down its sending side) or the front is stopping:
  // cheap (a poll and a peek), consumes nothing.
  bool client_gone() const;
  bool started() const { return state_ != State::kNone; }

 private:
  friend class HttpConnection;
  friend class HttpFront;
  enum class State { kNone, kStreaming, kDone, kBroken };
  HttpResponse(HttpConnection* conn, bool head_only, bool chunked, bool close)
      : conn_(conn), head_only_(head_only), chunked_(chunked), close_(close) {}
  bool put(std::string_view bytes);

  HttpConnection* conn_;
  bool head_only_;
  bool chunked_;  // streaming with chunked coding (HTTP/1.1); else close-delimited
  bool close_;    // Connection: close on this answer
  State state_ = State::kNone;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

struct HttpRoute {
  std::string method;  // "GET", "POST", ...
  std::string path;    // exact
  HttpHandler handler;
};

struct HttpErrorBody {
  std::string content_type;
  std::string body;
};

struct HttpFrontOptions {
  std::string listen_field = "server.http.listen";  // the config key named by errors
  std::string endpoint = "the HTTP API";            // named by TLS errors and logs
  std::string thread_name = "frost-http";  // accept thread; connections "<name>-c" (15 chars at most)
  HttpFrontLimits limits;
  std::vector<HttpRoute> routes;
  // The body of every answer the front makes itself (status, what was wrong); default: text/plain.
  std::function<HttpErrorBody(int status, const std::string& message)> error_body;
  // Called from the front's threads once per refusal (reasons above; each a string literal).
  std::function<void(const char* reason)> on_refused;
};

// Whether a refusal reason is one the front answered (4xx / 5xx) rather than a connection closed unanswered.
bool refusal_answered(const char* reason);

class HttpFront {
 public:
  using Limits = HttpFrontLimits;
  using Options = HttpFrontOptions;

  // Listens on HOST:PORT (port 0: a free one; backlog SOMAXCONN), over TLS with the identity `tls` has staged
  // when `tls` is not null (`tls` outlives the front), else plaintext. INVALID_ARGUMENT / UNAVAILABLE naming
  // options.listen_field when it cannot.
  static absl::StatusOr<std::unique_ptr<HttpFront>> start(const std::string& listen, TlsReloader* tls,
                                                          Options options);
  ~HttpFront();  // stop()
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  int port() const { return port_; }
  // Stops accepting, cuts every connection (handlers see client_gone()) and joins every thread. Idempotent.
  void stop();
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Answers written whole or finished (any status), TLS handshakes that failed, connections closed without an
  // answer (all reasons), requests the front refused with an answer, and connections open now.
  int64_t answered() const { return answered_.load(); }
  int64_t handshake_failures() const { return handshake_failures_.load(); }
  int64_t refused() const { return refused_.load(); }
  int64_t rejected() const { return rejected_.load(); }
  int open_connections();

 private:
  friend class HttpConnection;
  friend class HttpResponse;
  struct Conn {
    int fd = -1;
    std::string address;     // the client's IP address, the per-address key
    bool busy = false;       // being answered: cannot be displaced
    bool displaced = false;  // cut to make room for a newer connection (counted then)
    bool counted = false;    // its refusal was counted (at most one per connection)
    bool lingering = false;  // answered with a refusal, draining before the close: the first to go
    // Steady-clock ns of its last progress (accepted, or bytes read): of the connections not being answered,
    // the one that has made no progress for longest is displaced first — a trickler before a client whose
    // request is arriving now.
    std::atomic<int64_t> progress_ns{0};
    static constexpr std::chrono::milliseconds kFreshGrace{100};  // a new connection's head start
    std::thread thread;
  };
  using ConnList = std::list<Conn>;

  HttpFront(TlsReloader* tls, Options options) : tls_(tls), options_(std::move(options)) {}
  void accept_loop();
  // Admits a connection from `address` within the caps (displacing one that is not being answered when over
  // one); false (with *reason) when it must be closed at once.
  bool admit(const std::string& address, const char** reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void serve_connection(ConnList::iterator conn);
  // Answers a connection refused at a cap (503 naming it, plaintext only) and closes it.
  void refuse_at_accept(int fd, const char* reason);
  // Marks `conn` as being answered (it can no longer be displaced); false when it was displaced meanwhile.
  bool begin_answer(ConnList::iterator conn);
  // Marks `conn` as displaceable again (idle between requests, or lingering: then it is the first to go).
  void end_answer(ConnList::iterator conn, bool lingering = false);
  // Counts a refusal of `conn` (once per connection; not when it was displaced: counted then).
  void refuse(ConnList::iterator conn, const char* reason);
  void count_refusal(const char* reason);
  // The route of `method` `path`, or null; *allow: the methods `path` has ("" when none: 404, else 405).
  const HttpRoute* route(const std::string& method, const std::string& path, std::string* allow) const;
  HttpErrorBody error_body(int status, const std::string& message) const;
  // The SSL_CTX for the identity staged now (rebuilt when TlsReloader staged a new one).
  absl::StatusOr<std::shared_ptr<http::TlsServerContext>> context();

  TlsReloader* tls_;
  Options options_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: stop() writes, the accept loop's poll() returns
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> answered_{0}, handshake_failures_{0}, refused_{0}, rejected_{0};
  std::atomic<uint64_t> ctx_error_logged_{~uint64_t{0}};  // the identity generation whose error was logged

  absl::Mutex mu_;
  std::shared_ptr<http::TlsServerContext> ctx_ ABSL_GUARDED_BY(mu_);
  uint64_t ctx_generation_ ABSL_GUARDED_BY(mu_) = 0;
  ConnList conns_ ABSL_GUARDED_BY(mu_);                          // connections being served, oldest first
  std::map<std::string, int> per_address_ ABSL_GUARDED_BY(mu_);  // address → live entries of conns_
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);       // threads of ended connections, joined later
};

}  // namespace frost::server
