// HttpFront: the listener, the accept thread, admission within the connection caps (with displacement) and
// stop(). One connection's request loop is server/http_front_conn.cc.
#include "server/http_front.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "server/server_config.h"

namespace frost::server {

bool refusal_answered(const char* reason) {
  for (const char* r : {"bad_request", "uri_too_long", "head_too_large", "body_too_large",
                        "unsupported_encoding", "expectation_failed", "not_implemented"})
    if (std::strcmp(r, reason) == 0) return true;
  return false;
}

const std::string* HttpRequest::header(std::string_view name) const {
  for (const http::Header& h : headers)
    if (http::iequals(h.name, name)) return &h.value;
  return nullptr;
}

absl::StatusOr<std::unique_ptr<HttpFront>> HttpFront::start(const std::string& listen, TlsReloader* tls,
                                                            Options options) {
  const std::string field = options.listen_field;
  if (absl::Status st = validate_host_port(field, listen); !st.ok()) return st;
  const Limits& lim = options.limits;
  if (lim.max_connections < 1 || lim.max_connections_per_address < 1 || lim.max_head_bytes < 64 ||
      lim.max_request_line < 16 || lim.max_headers < 1 || !(lim.head_timeout_s > 0) ||
      !(lim.body_timeout_s > 0) || !(lim.idle_timeout_s > 0) || !(lim.write_timeout_s > 0) ||
      lim.linger_s < 0)
    return absl::InvalidArgumentError(absl::StrCat(field, ": HTTP limits must be positive"));
  std::unique_ptr<HttpFront> s(new HttpFront(tls, std::move(options)));
  if (tls) {  // the identity must be usable before anything listens
    absl::StatusOr<std::shared_ptr<http::TlsServerContext>> ctx = s->context();
    if (!ctx.ok()) return ctx.status();
  }
  const HostPort hp = split_host_port(listen);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), hp.port.c_str(), &hints, &res);
      rc != 0)
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": cannot resolve \"", listen, "\": ", gai_strerror(rc)));
  std::string error = "no address";
  for (addrinfo* a = res; a && s->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      s->listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(res);
  if (s->listen_fd_ < 0)
    return absl::UnavailableError(absl::StrCat(field, ": cannot listen on \"", listen, "\": ", error));
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(s->wake_fd_, O_CLOEXEC) != 0)
    return absl::UnavailableError(absl::StrCat(field, ": pipe2 failed"));
  HttpFront* self = s.get();
  s->acceptor_ = std::thread([self] { self->accept_loop(); });
  return s;
}

HttpFront::~HttpFront() { stop(); }

absl::StatusOr<std::shared_ptr<http::TlsServerContext>> HttpFront::context() {
  const uint64_t gen = tls_->generation();
  {
    absl::MutexLock l(&mu_);
    if (ctx_ && ctx_generation_ == gen) return ctx_;
  }
  const TlsReloader::Staged id = tls_->staged();
  absl::StatusOr<std::shared_ptr<http::TlsServerContext>> ctx =
      http::build_tls_server_ctx(id, options_.endpoint);
  if (!ctx.ok()) {
    if (ctx_error_logged_.exchange(id.generation) != id.generation)  // once per identity, not per connection
      FROST_LOG_ERROR("frostd: %s over TLS: %s", options_.endpoint.c_str(),
                      std::string(ctx.status().message()).c_str());
    return ctx.status();
  }
  absl::MutexLock l(&mu_);
  if (!ctx_ || id.generation >= ctx_generation_) {
    ctx_ = *ctx;
    ctx_generation_ = id.generation;
  }
  return ctx_;
}

int HttpFront::open_connections() {
  absl::MutexLock l(&mu_);
  return static_cast<int>(conns_.size());
}

void HttpFront::count_refusal(const char* reason) {
  (refusal_answered(reason) ? rejected_ : refused_).fetch_add(1);
  if (options_.on_refused) options_.on_refused(reason);
}

void HttpFront::refuse(ConnList::iterator conn, const char* reason) {
  absl::MutexLock l(&mu_);
  if (conn->displaced || conn->counted || stopping_.load()) return;
  conn->counted = true;
  count_refusal(reason);  // before the client can see the answer or the close
}

bool HttpFront::admit(const std::string& address, const char** reason) {
  const Limits& lim = options_.limits;
  // Cuts `victim` (not being answered): it stops counting against the caps now, and its thread ends as soon
  // as its next wait returns.
  auto displace = [&](ConnList::iterator victim, const char* why) {
    victim->displaced = true;
    if (--per_address_[victim->address] == 0) per_address_.erase(victim->address);
    if (!victim->counted) count_refusal(why);  // counted before the client can see the close
    victim->counted = true;
    shutdown(victim->fd, SHUT_RDWR);
  };
  auto open = [](const Conn& c) { return !c.displaced && !c.busy; };
  // Which of two open connections goes first: a lingering one, else the one idle (no byte read) for longest.
  auto sooner = [](const Conn& a, const Conn& b) {
    if (a.lingering != b.lingering) return a.lingering;
    return a.progress_ns.load(std::memory_order_relaxed) < b.progress_ns.load(std::memory_order_relaxed);
  };
  if (auto it = per_address_.find(address);
      it != per_address_.end() && it->second >= lim.max_connections_per_address) {
    auto victim = conns_.end();
    for (auto c = conns_.begin(); c != conns_.end(); ++c) {
      if (open(*c) && c->address == address && (victim == conns_.end() || sooner(*c, *victim))) victim = c;
    }
    if (victim == conns_.end()) {
      *reason = "address_limit";
      return false;
    }
    displace(victim, "address_limit");
  }
  int total = 0;
  for (const auto& [a, n] : per_address_) total += n;
  if (total >= lim.max_connections) {
    // Of the address that holds the most connections, the open one that goes first (sooner above).
    auto victim = conns_.end();
    int most = 0;
    for (auto c = conns_.begin(); c != conns_.end(); ++c) {
      if (!open(*c)) continue;
      const int n = per_address_[c->address];
      if (n > most || (n == most && sooner(*c, *victim))) {
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

// A connection over a cap while every competitor is being answered: a 503 saying which cap (plaintext; a TLS
// client, which would first need a handshake, is only closed), written without waiting — the answer is small
// and the socket new — then closed. What the client already sent is read first (without waiting), so that the
// close is a FIN, not a reset that could discard the answer before the client reads it.
void HttpFront::refuse_at_accept(int fd, const char* reason) {
  if (tls_ == nullptr) {
    char buf[16384];
    for (int i = 0; i < 4 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0; ++i) {
    }
    const Limits& lim = options_.limits;
    const bool per_address = std::string_view(reason) == "address_limit";
    const HttpErrorBody e = error_body(
        503, per_address ? absl::StrCat("too many connections from this address: ", lim.max_connections_per_address,
                                        " are being answered (server.http.max_connections_per_address); retry")
                         : absl::StrCat("too many connections: ", lim.max_connections,
                                        " are being answered (server.http.max_connections); retry"));
    const std::string answer = absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: ", e.content_type,
                                            "\r\nContent-Length: ", e.body.size(),
                                            "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n", e.body);
    if (send(fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) shutdown(fd, SHUT_WR);
  }
  close(fd);
}

void HttpFront::accept_loop() {
  pthread_setname_np(pthread_self(), options_.thread_name.substr(0, 15).c_str());
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
    // Every SSE event is a small write: without TCP_NODELAY, Nagle holds each one back until the client ACKs
    // the previous (40 ms delayed ACKs: measured 86 ms to the first token instead of 6).
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const std::string address = http::peer_address(peer);
    std::vector<std::thread> done;
    {
      absl::MutexLock l(&mu_);
      done.swap(finished_);
      const char* reason = nullptr;
      bool admitted = admit(address, &reason);
      if (admitted) {
        ++per_address_[address];
        conns_.emplace_back();
        auto conn = std::prev(conns_.end());
        // A new connection counts as having made progress a little in the future: its thread may not have read
        // the request that is already in its socket when a burst of newer connections arrives.
        conn->progress_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now().time_since_epoch() + Conn::kFreshGrace)
                                    .count(),
                                std::memory_order_relaxed);
        conn->fd = fd;
        conn->address = address;
        try {
          conn->thread = std::thread([this, conn] { serve_connection(conn); });  // it waits for mu_ to end
        } catch (const std::system_error&) {  // out of threads: refused like a connection over the cap
          if (--per_address_[address] == 0) per_address_.erase(address);
          conns_.erase(conn);
          admitted = false;
          reason = "connection_limit";
        }
      }
      if (!admitted) {
        count_refusal(reason);  // counted before the client can see the answer
        refuse_at_accept(fd, reason);  // every connection it competes with is being answered: it waits for none
      }
    }
    for (std::thread& t : done) t.join();  // they have handed over their thread: they are returning
  }
}

bool HttpFront::begin_answer(ConnList::iterator conn) {
  absl::MutexLock l(&mu_);
  if (conn->displaced) return false;
  conn->busy = true;
  return true;
}

void HttpFront::end_answer(ConnList::iterator conn, bool lingering) {
  absl::MutexLock l(&mu_);
  conn->busy = false;
  conn->lingering = lingering;
}

const HttpRoute* HttpFront::route(const std::string& method, const std::string& path,
                                  std::string* allow) const {
  allow->clear();
  const HttpRoute* found = nullptr;
  for (const HttpRoute& r : options_.routes) {
    if (r.path != path) continue;
    absl::StrAppend(allow, allow->empty() ? "" : ", ", r.method);
    if (r.method == method) found = &r;
  }
  return found;
}

HttpErrorBody HttpFront::error_body(int status, const std::string& message) const {
  if (options_.error_body) return options_.error_body(status, message);
  return HttpErrorBody{"text/plain; charset=utf-8", message + "\n"};
}

void HttpFront::stop() {
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
