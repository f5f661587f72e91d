#include "server/metrics_https.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "server/server_config.h"
#include "server/tls.h"

namespace frost::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string ssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
BioPtr mem_bio(const std::string& s) { return BioPtr(BIO_new_mem_buf(s.data(), static_cast<int>(s.size()))); }

// One HTTP response, the whole of it.
std::string response(int code, const char* reason, const std::string& content_type, const std::string& body,
                     bool head_only) {
  std::string r = absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                               "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n");
  if (!head_only) r += body;
  return r;
}

Clock::time_point deadline_in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits until `fd` is ready for `events` or `deadline` passes (false then). An error or hang-up counts as
// ready: the next read or write reports it.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left + 1, 60'000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;
  }
}

enum class Io { kOk, kEof, kTimeout, kError };

// One connection's bytes, plain or TLS, every wait bounded by a deadline (the socket is non-blocking).
class Stream {
 public:
  Stream(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}

  Io handshake(Clock::time_point deadline) {
    if (!ssl_) return Io::kOk;
    return ssl_call([this] { return SSL_accept(ssl_); }, deadline, nullptr);
  }

  // Up to `cap` bytes into `buf` (*n of them).
  Io read(char* buf, size_t cap, size_t* n, Clock::time_point deadline) {
    if (ssl_) {
      int got = 0;
      const Io r =
          ssl_call([&] { return SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(cap, 1 << 30))); },
                   deadline, &got);
      *n = static_cast<size_t>(std::max(got, 0));
      return r;
    }
    for (;;) {
      const ssize_t got = recv(fd_, buf, cap, 0);
      if (got > 0) {
        *n = static_cast<size_t>(got);
        return Io::kOk;
      }
      if (got == 0) return Io::kEof;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::kError;
      if (!wait_fd(fd_, POLLIN, deadline)) return Io::kTimeout;
    }
  }

  Io write_all(const std::string& out, Clock::time_point deadline) {
    for (size_t off = 0; off < out.size();) {
      const size_t chunk = std::min<size_t>(out.size() - off, 1 << 20);
      if (ssl_) {
        int put = 0;
        const Io r = ssl_call([&] { return SSL_write(ssl_, out.data() + off, static_cast<int>(chunk)); },
                              deadline, &put);
        if (r != Io::kOk) return r;
        off += static_cast<size_t>(put);
        continue;
      }
      const ssize_t put = send(fd_, out.data() + off, chunk, MSG_NOSIGNAL);
      if (put > 0) {
        off += static_cast<size_t>(put);
      } else if (put < 0 && errno == EINTR) {
        continue;
      } else if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_fd(fd_, POLLOUT, deadline)) return Io::kTimeout;
      } else {
        return Io::kError;
      }
    }
    return Io::kOk;
  }

  // Sends close_notify without waiting for the peer's (TLS); nothing for plaintext.
  void close_notify() {
    if (ssl_) {
      ERR_clear_error();
      SSL_shutdown(ssl_);
    }
  }

 private:
  // Runs an SSL_* call until it succeeds, waiting (bounded by `deadline`) for what it wants.
  template <typename F>
  Io ssl_call(F op, Clock::time_point deadline, int* result) {
    for (;;) {
      ERR_clear_error();
      const int r = op();
      if (r > 0) {
        if (result) *result = r;
        return Io::kOk;
      }
      switch (SSL_get_error(ssl_, r)) {
        case SSL_ERROR_WANT_READ:
          if (!wait_fd(fd_, POLLIN, deadline)) return Io::kTimeout;
          break;
        case SSL_ERROR_WANT_WRITE:
          if (!wait_fd(fd_, POLLOUT, deadline)) return Io::kTimeout;
          break;
        case SSL_ERROR_ZERO_RETURN:
          return Io::kEof;
        default:
          return Io::kError;
      }
    }
  }

  int fd_;
  SSL* ssl_;
};

// The client's IP address as text (an IPv4-mapped IPv6 address as its IPv4 form): the per-address key.
std::string peer_address(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &a, buf, sizeof(buf));
    }
  }
  return buf;
}

// What to answer a complete request head `head` (without the body; HEAD gets the head only).
std::string answer(const std::string& head, const std::function<std::string()>& render, bool* ok) {
  *ok = false;
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos)
    return response(400, "Bad Request", "text/plain", "bad request line\n", false);
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD")
    return response(405, "Method Not Allowed", "text/plain", "only GET /metrics\n", false);
  if (path != "/metrics" && path != "/")
    return response(404, "Not Found", "text/plain", "only /metrics\n", method == "HEAD");
  *ok = true;
  return response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render(), method == "HEAD");
}

}  // namespace

MetricsHttpServer::Ctx::~Ctx() {
  if (ctx) SSL_CTX_free(ctx);
}

// An SSL_CTX serving `id`: TLS 1.2+, its chain and key, and with a client CA its verification (required when
// `require_client_cert`), like the gRPC port (TlsReloader::credentials).
absl::StatusOr<std::shared_ptr<MetricsHttpServer::Ctx>> build_tls_server_ctx(const TlsReloader::Staged& id) {
  auto c = std::make_shared<MetricsHttpServer::Ctx>();
  c->ctx = SSL_CTX_new(TLS_server_method());
  if (!c->ctx) return absl::InternalError(absl::StrCat("server.tls.metrics: SSL_CTX_new: ", ssl_error()));
  SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(c->ctx, SSL_OP_NO_RENEGOTIATION);
  {
    BioPtr b = mem_bio(id.cert);
    X509* leaf = PEM_read_bio_X509_AUX(b.get(), nullptr, nullptr, nullptr);
    if (!leaf || SSL_CTX_use_certificate(c->ctx, leaf) != 1) {
      if (leaf) X509_free(leaf);
      return absl::InvalidArgumentError(
          absl::StrCat("server.tls.cert_file: not usable for /metrics: ", ssl_error()));
    }
    X509_free(leaf);
    while (X509* x = PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr)) {
      if (SSL_CTX_add0_chain_cert(c->ctx, x) != 1) {  // takes ownership on success only
        X509_free(x);
        return absl::InvalidArgumentError(absl::StrCat("server.tls.cert_file: chain: ", ssl_error()));
      }
    }
    ERR_clear_error();  // the end of the PEM stream
  }
  {
    BioPtr b = mem_bio(id.key);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr);
    const bool ok = key && SSL_CTX_use_PrivateKey(c->ctx, key) == 1 && SSL_CTX_check_private_key(c->ctx) == 1;
    if (key) EVP_PKEY_free(key);
    if (!ok)
      return absl::InvalidArgumentError(
          absl::StrCat("server.tls.key_file: not usable for /metrics: ", ssl_error()));
  }
  if (!id.ca.empty()) {
    X509_STORE* store = SSL_CTX_get_cert_store(c->ctx);
    BioPtr b = mem_bio(id.ca);
    int n = 0;
    while (X509* x = PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(store, x);
      SSL_CTX_add_client_CA(c->ctx, x);  // copies the name
      X509_free(x);
      ++n;
    }
    ERR_clear_error();
    if (n == 0) return absl::InvalidArgumentError("server.tls.client_ca_file: no certificate for /metrics");
    SSL_CTX_set_verify(
        c->ctx, SSL_VERIFY_PEER | (id.require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
  }
  return c;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(
    const std::string& listen, TlsReloader* tls, std::function<std::string()> render, Options options) {
  if (absl::Status st = validate_host_port("server.metrics_listen", listen); !st.ok()) return st;
  Limits& lim = options.limits;
  if (lim.max_connections < 1 || lim.max_connections_per_address < 1 || !(lim.head_deadline_s > 0) ||
      !(lim.write_deadline_s > 0) || lim.max_request_head < 16)
    return absl::InvalidArgumentError("server.metrics_listen: limits must be positive");
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer(tls, std::move(render), std::move(options)));
  if (tls) {  // the identity must be usable before anything listens
    absl::StatusOr<std::shared_ptr<Ctx>> ctx = s->context();
    if (!ctx.ok()) return ctx.status();
  }
  const HostPort hp = split_host_port(listen);
  const std::string& host = hp.host;
  const std::string& port = hp.port;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("server.metrics_listen: cannot resolve \"", listen, "\": ", gai_strerror(rc)));
  std::string error = "no address";
  for (addrinfo* a = res; a && s->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      s->listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(res);
  if (s->listen_fd_ < 0)
    return absl::UnavailableError(
        absl::StrCat("server.metrics_listen: cannot listen on \"", listen, "\": ", error));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(s->wake_fd_, O_CLOEXEC) != 0)
    return absl::UnavailableError("server.metrics_listen: pipe2 failed");
  MetricsHttpServer* self = s.get();
  s->acceptor_ = std::thread([self] { self->accept_loop(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() { stop(); }

absl::StatusOr<std::shared_ptr<MetricsHttpServer::Ctx>> MetricsHttpServer::context() {
  const uint64_t gen = tls_->generation();
  {
    absl::MutexLock l(&mu_);
    if (ctx_ && ctx_generation_ == gen) return ctx_;
  }
  const TlsReloader::Staged id = tls_->staged();
  absl::StatusOr<std::shared_ptr<Ctx>> ctx = build_tls_server_ctx(id);
  if (!ctx.ok()) return ctx.status();
  absl::MutexLock l(&mu_);
  if (!ctx_ || id.generation >= ctx_generation_) {
    ctx_ = *ctx;
    ctx_generation_ = id.generation;
  }
  return ctx_;
}

int MetricsHttpServer::open_connections() {
  absl::MutexLock l(&mu_);
  return static_cast<int>(conns_.size());
}

void MetricsHttpServer::refuse(const char* reason) {
  refused_.fetch_add(1);
  if (options_.on_refused) options_.on_refused(reason);
}

bool MetricsHttpServer::admit(const std::string& address, const char** reason) {
  const Limits& lim = options_.limits;
  // Cuts `victim` (a connection still reading its head): it stops counting against the caps now, and its
  // thread ends as soon as its next wait returns.
  auto displace = [&](ConnList::iterator victim, const char* why) {
    victim->displaced = true;
    if (--per_address_[victim->address] == 0) per_address_.erase(victim->address);
    refuse(why);  // counted before the client can see the close
    shutdown(victim->fd, SHUT_RDWR);
  };
  auto live = [](const Conn& c) { return !c.displaced; };
  if (auto it = per_address_.find(address);
      it != per_address_.end() && it->second >= lim.max_connections_per_address) {
    auto victim = std::find_if(conns_.begin(), conns_.end(),
                               [&](const Conn& c) { return live(c) && c.in_head && c.address == address; });
    if (victim == conns_.end()) {
      *reason = "address_limit";
      return false;
    }
    displace(victim, "address_limit");
  }
  int total = 0;
  for (const auto& [a, n] : per_address_) total += n;
  if (total >= lim.max_connections) {
    // The oldest connection still in its head, of the address that holds the most connections.
    auto victim = conns_.end();
    int most = 0;
    for (auto c = conns_.begin(); c != conns_.end(); ++c) {
      if (!live(*c) || !c->in_head) continue;
      const int n = per_address_[c->address];
      if (n > most) {
        most = n;
        victim = c;
      }
    }
    if (victim == conns_.end()) {
      *reason = "connection_limit";
      return false;
    }
    displace(victim, "connection_limit");
  }
  return true;
}

void MetricsHttpServer::accept_loop() {
  pthread_setname_np(pthread_self(), "frost-metrics");
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (stopping_.load()) break;
    if (!(p[0].revents & POLLIN)) continue;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof(peer);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors: do not spin
      continue;
    }
    const std::string address = peer_address(peer);
    std::vector<std::thread> done;
    {
      absl::MutexLock l(&mu_);
      done.swap(finished_);
      const char* reason = nullptr;
      if (!admit(address, &reason)) {
        refuse(reason);  // counted before the client can see the close
        close(fd);       // every connection it competes with is already answering: this one waits for none
      } else {
        ++per_address_[address];
        conns_.push_back(Conn{});
        auto conn = std::prev(conns_.end());
        conn->fd = fd;
        conn->address = address;
        conn->thread = std::thread([this, conn] { serve_connection(conn); });  // it waits for mu_ to end
      }
    }
    for (std::thread& t : done) t.join();  // they have handed over their thread: they are returning
  }
}

bool MetricsHttpServer::finish_head(ConnList::iterator conn) {
  absl::MutexLock l(&mu_);
  if (conn->displaced) return false;
  conn->in_head = false;
  return true;
}

void MetricsHttpServer::serve_connection(ConnList::iterator conn) {
  pthread_setname_np(pthread_self(), "frost-metrics-c");
  const Limits& lim = options_.limits;
  const Clock::time_point head_deadline = deadline_in(lim.head_deadline_s);
  int fd = -1;
  {
    absl::MutexLock l(&mu_);
    fd = conn->fd;
  }
  const char* refused = nullptr;  // why this connection ends without an answer, when it is counted
  SSL* ssl = nullptr;
  bool usable = true;
  if (tls_) {
    absl::StatusOr<std::shared_ptr<Ctx>> ctx = context();
    if (!ctx.ok()) {
      const uint64_t gen = tls_->generation();
      if (ctx_error_logged_.exchange(gen) != gen)  // once per identity, not per connection
        FROST_LOG_ERROR("frostd: /metrics over TLS: %s", std::string(ctx.status().message()).c_str());
      usable = false;
    } else if ((ssl = SSL_new((*ctx)->ctx)) == nullptr || SSL_set_fd(ssl, fd) != 1) {
      usable = false;
    }
  }
  Stream stream(fd, ssl);
  if (usable) {
    Io io = stream.handshake(head_deadline);
    if (io == Io::kTimeout) {
      refused = "head_timeout";
    } else if (io != Io::kOk) {
      handshake_failures_.fetch_add(1);
      refused = "tls_handshake";
      FROST_LOG_DEBUG("frostd: /metrics TLS handshake failed: %s", ssl_error().c_str());
    } else {
      std::string head;
      char buf[2048];
      while (head.find("\r\n\r\n") == std::string::npos && head.size() < lim.max_request_head) {
        size_t n = 0;
        io = stream.read(buf, std::min(sizeof(buf), lim.max_request_head - head.size()), &n, head_deadline);
        if (io != Io::kOk) break;
        head.append(buf, n);
      }
      std::string out;
      bool ok = false;
      if (head.find("\r\n\r\n") != std::string::npos) {
        out = answer(head, render_, &ok);
      } else if (head.size() >= lim.max_request_head) {
        out = response(431, "Request Header Fields Too Large", "text/plain", "", false);
      } else if (io == Io::kTimeout) {
        refused = "head_timeout";
      }  // else the client went away (or was displaced: counted then)
      if (!out.empty() && finish_head(conn)) {
        io = stream.write_all(out, deadline_in(lim.write_deadline_s));
        if (io == Io::kOk) {
          if (ok) served_.fetch_add(1);
          stream.close_notify();
        } else if (io == Io::kTimeout) {
          refused = "write_timeout";
        }
      }
    }
  }
  if (ssl) SSL_free(ssl);
  ERR_clear_error();
  absl::MutexLock l(&mu_);
  if (conn->displaced) {
    refused = nullptr;  // counted when it was displaced
  } else if (--per_address_[conn->address] == 0) {
    per_address_.erase(conn->address);
  }
  if (refused && !stopping_.load()) refuse(refused);
  close(fd);  // after the books: a client that sees the close may connect again at once
  finished_.push_back(std::move(conn->thread));
  conns_.erase(conn);
}

void MetricsHttpServer::stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fd_[1] >= 0) {
    const char x = 'x';
    (void)!write(wake_fd_[1], &x, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    for (Conn& c : conns_) shutdown(c.fd, SHUT_RDWR);  // their next wait returns at once
    mu_.Await(absl::Condition(
        +[](ConnList* conns) { return conns->empty(); }, &conns_));
    threads.swap(finished_);
  }
  for (std::thread& t : threads) t.join();
  for (int* fd : {&listen_fd_, &wake_fd_[0], &wake_fd_[1]}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace frost::server
