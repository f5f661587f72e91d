#include "server/metrics_https.h"

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
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "server/server_config.h"
#include "server/tls.h"

namespace frost::server {
namespace {

constexpr size_t kMaxRequestHead = 8192;

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

}  // namespace

HttpsMetricsServer::Ctx::~Ctx() {
  if (ctx) SSL_CTX_free(ctx);
}

// An SSL_CTX serving `id`: TLS 1.2+, its chain and key, and with a client CA its verification (required when
// `require_client_cert`), like the gRPC port (TlsReloader::credentials).
absl::StatusOr<std::shared_ptr<HttpsMetricsServer::Ctx>> build_tls_server_ctx(const TlsReloader::Staged& id) {
  auto c = std::make_shared<HttpsMetricsServer::Ctx>();
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


absl::StatusOr<std::unique_ptr<HttpsMetricsServer>> HttpsMetricsServer::start(
    const std::string& listen, TlsReloader* tls, std::function<std::string()> render) {
  if (absl::Status st = validate_host_port("server.metrics_listen", listen); !st.ok()) return st;
  if (!tls) return absl::InvalidArgumentError("server.tls.metrics: needs server.tls.cert_file and key_file");
  std::unique_ptr<HttpsMetricsServer> s(new HttpsMetricsServer(tls, std::move(render)));
  {  // the identity must be usable before anything listens
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
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
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
  if (pipe2(s->wake_fd_, O_CLOEXEC) != 0) return absl::UnavailableError("server.tls.metrics: pipe2 failed");
  HttpsMetricsServer* self = s.get();
  s->acceptor_ = std::thread([self] { self->accept_loop(); });
  return s;
}

HttpsMetricsServer::~HttpsMetricsServer() { stop(); }

absl::StatusOr<std::shared_ptr<HttpsMetricsServer::Ctx>> HttpsMetricsServer::context() {
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

void HttpsMetricsServer::accept_loop() {
  pthread_setname_np(pthread_self(), "frost-metrics");
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (stopping_.load()) break;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::vector<std::thread> done;
    {
      absl::MutexLock l(&mu_);
      for (auto it = workers_.begin(); it != workers_.end();) {  // reap the connections that ended
        auto f = std::find(finished_.begin(), finished_.end(), it->get_id());
        if (f != finished_.end()) {
          finished_.erase(f);
          done.push_back(std::move(*it));
          it = workers_.erase(it);
        } else {
          ++it;
        }
      }
      if (static_cast<int>(active_fds_.size()) >= kMaxConnections) {
        close(fd);  // a scraper needs one connection; more at once is a flood
      } else {
        timeval tv{kIoTimeoutS, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        active_fds_.push_back(fd);
        workers_.emplace_back([this, fd] { serve_connection(fd); });
      }
    }
    for (std::thread& t : done) t.join();  // they have pushed their id: they are returning
  }
}

void HttpsMetricsServer::serve_connection(int fd) {
  pthread_setname_np(pthread_self(), "frost-metrics-c");
  SSL* ssl = nullptr;
  absl::StatusOr<std::shared_ptr<Ctx>> ctx = context();
  if (!ctx.ok()) {
    FROST_LOG_ERROR("frostd: /metrics over TLS: %s", std::string(ctx.status().message()).c_str());
  } else if ((ssl = SSL_new((*ctx)->ctx)) != nullptr && SSL_set_fd(ssl, fd) == 1) {
    if (SSL_accept(ssl) != 1) {
      handshake_failures_.fetch_add(1);
      FROST_LOG_DEBUG("frostd: /metrics TLS handshake failed: %s", ssl_error().c_str());
    } else {
      std::string head;
      char buf[2048];
      while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxRequestHead) {
        const int n = SSL_read(ssl, buf, sizeof(buf));
        if (n <= 0) break;
        head.append(buf, static_cast<size_t>(n));
      }
      std::string out;
      const size_t eol = head.find("\r\n");
      if (head.find("\r\n\r\n") == std::string::npos || eol == std::string::npos) {
        out = head.size() >= kMaxRequestHead
                  ? response(431, "Request Header Fields Too Large", "text/plain", "", false)
                  : std::string();  // the client went away or timed out
      } else {
        const std::string line = head.substr(0, eol);
        const size_t sp1 = line.find(' ');
        const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
        if (sp2 == std::string::npos) {
          out = response(400, "Bad Request", "text/plain", "bad request line\n", false);
        } else {
          const std::string method = line.substr(0, sp1);
          std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
          path = path.substr(0, path.find('?'));
          if (method != "GET" && method != "HEAD") {
            out = response(405, "Method Not Allowed", "text/plain", "only GET /metrics\n", false);
          } else if (path != "/metrics" && path != "/") {
            out = response(404, "Not Found", "text/plain", "only /metrics\n", method == "HEAD");
          } else {
            out =
                response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_(), method == "HEAD");
            served_.fetch_add(1);
          }
        }
      }
      for (size_t off = 0; off < out.size();) {
        const int n =
            SSL_write(ssl, out.data() + off, static_cast<int>(std::min<size_t>(out.size() - off, 1 << 20)));
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      SSL_shutdown(ssl);
    }
  }
  if (ssl) SSL_free(ssl);
  ERR_clear_error();
  absl::MutexLock l(&mu_);
  active_fds_.erase(std::remove(active_fds_.begin(), active_fds_.end(), fd), active_fds_.end());
  close(fd);
  finished_.push_back(std::this_thread::get_id());
}

void HttpsMetricsServer::stop() {
  if (stopping_.exchange(true)) return;
  if (wake_fd_[1] >= 0) {
    const char x = 'x';
    (void)!write(wake_fd_[1], &x, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> workers;
  {
    absl::MutexLock l(&mu_);
    for (int fd : active_fds_) shutdown(fd, SHUT_RDWR);  // unblocks their reads and writes
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  for (int* fd : {&listen_fd_, &wake_fd_[0], &wake_fd_[1]}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace frost::server
