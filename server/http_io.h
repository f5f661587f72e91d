#pragma once
// The socket side of server/http_front.h: one connection's bytes, plain or OpenSSL TLS, every wait bounded by
// a deadline (the socket is non-blocking and every wait polls with the time left, so a peer that trickles
// bytes cannot extend it); the SSL_CTX of a staged TLS identity (server/tls.h: the same certificate, client
// CA and rotation as the gRPC port); the client's address as the per-address key.
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/tls.h"

namespace frost::server::http {

using Clock = std::chrono::steady_clock;
Clock::time_point deadline_after(Clock::time_point t, double seconds);
inline Clock::time_point deadline_in(double seconds) { return deadline_after(Clock::now(), seconds); }

enum class Io { kOk, kEof, kTimeout, kError };

class Stream {
 public:
  // `fd` non-blocking; `ssl` (owned by the caller) set on `fd`, or null for plaintext.
  Stream(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}

  Io handshake(Clock::time_point deadline);
  // Up to `cap` bytes into `buf` (*n of them).
  Io read(char* buf, size_t cap, size_t* n, Clock::time_point deadline);
  Io write_all(std::string_view out, Clock::time_point deadline);
  // Sends close_notify without waiting for the peer's (TLS); nothing for plaintext.
  void close_notify();
  // Whether the peer has closed or reset the connection, or shut down its sending side, looking without
  // waiting and without consuming anything it sent (a pipelined request stays for the next read).
  bool peer_gone() const;

 private:
  // Runs an SSL_* call until it succeeds, waiting (bounded by `deadline`) for what it wants.
  template <typename F>
  Io ssl_call(F op, Clock::time_point deadline, int* result);

  int fd_;
  SSL* ssl_;
};

// The SSL_CTX of one staged identity.
struct TlsServerContext {
  SSL_CTX* ctx = nullptr;
  ~TlsServerContext();
};
// An SSL_CTX serving `id`: TLS 1.2+, its chain and key, and with a client CA its verification (required when
// `require_client_cert`), like the gRPC port (TlsReloader::credentials). `endpoint` ("/metrics", "the OpenAI
// API") is named in errors.
absl::StatusOr<std::shared_ptr<TlsServerContext>> build_tls_server_ctx(const TlsReloader::Staged& id,
                                                                       const std::string& endpoint);
// The oldest queued OpenSSL error as text, clearing the queue.
std::string ssl_error();

// The client's IP address as text (an IPv4-mapped IPv6 address as its IPv4 form): the per-address key.
std::string peer_address(const sockaddr_storage& ss);

}  // namespace frost::server::http
