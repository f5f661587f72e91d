#include "server/http_io.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace frost::server::http {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
BioPtr mem_bio(const std::string& s) { return BioPtr(BIO_new_mem_buf(s.data(), static_cast<int>(s.size()))); }

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

}  // namespace

Clock::time_point deadline_after(Clock::time_point t, double seconds) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string ssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

template <typename F>
Io Stream::ssl_call(F op, Clock::time_point deadline, int* result) {
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

Io Stream::handshake(Clock::time_point deadline) {
  if (!ssl_) return Io::kOk;
  return ssl_call([this] { return SSL_accept(ssl_); }, deadline, nullptr);
}

Io Stream::read(char* buf, size_t cap, size_t* n, Clock::time_point deadline) {
  *n = 0;
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

Io Stream::write_all(std::string_view out, Clock::time_point deadline) {
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

void Stream::close_notify() {
  if (ssl_) {
    ERR_clear_error();
    SSL_shutdown(ssl_);
  }
}

bool Stream::peer_gone() const {
  // POLLRDHUP: the peer shut down its sending side (a FIN, also behind unread bytes such as a TLS
  // close_notify alert), as nginx treats a pending EOF while it answers; POLLHUP / POLLERR: reset or closed
  // both ways.
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (!(p.revents & POLLIN)) return false;
  char c;
  const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

TlsServerContext::~TlsServerContext() {
  if (ctx) SSL_CTX_free(ctx);
}

absl::StatusOr<std::shared_ptr<TlsServerContext>> build_tls_server_ctx(const TlsReloader::Staged& id,
                                                                       const std::string& endpoint) {
  auto c = std::make_shared<TlsServerContext>();
  c->ctx = SSL_CTX_new(TLS_server_method());
  if (!c->ctx) return absl::InternalError(absl::StrCat(endpoint, " over TLS: SSL_CTX_new: ", ssl_error()));
  SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(c->ctx, SSL_OP_NO_RENEGOTIATION);
  {
    BioPtr b = mem_bio(id.cert);
    X509* leaf = PEM_read_bio_X509_AUX(b.get(), nullptr, nullptr, nullptr);
    if (!leaf || SSL_CTX_use_certificate(c->ctx, leaf) != 1) {
      if (leaf) X509_free(leaf);
      return absl::InvalidArgumentError(
          absl::StrCat("server.tls.cert_file: not usable for ", endpoint, ": ", ssl_error()));
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
          absl::StrCat("server.tls.key_file: not usable for ", endpoint, ": ", ssl_error()));
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
    if (n == 0)
      return absl::InvalidArgumentError(
          absl::StrCat("server.tls.client_ca_file: no certificate for ", endpoint));
    SSL_CTX_set_verify(
        c->ctx, SSL_VERIFY_PEER | (id.require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
  }
  return c;
}

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

}  // namespace frost::server::http
