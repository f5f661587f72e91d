// One connection of HttpFront (server/http_front.h): the TLS handshake, then requests one after another —
// head, framing, route, 100 Continue, body, handler, answer — until the client closes, a refusal, a deadline,
// Connection: close, or stop().
#include <malloc.h>
#include <openssl/err.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "server/http_front.h"

namespace frost::server {

using http::Clock;
using http::Io;

constexpr size_t kTrimAfterBodyBytes = size_t{256} << 10;  // request bodies this large: malloc_trim after

class HttpConnection {
 public:
  HttpConnection(HttpFront* front, HttpFront::ConnList::iterator conn, int fd, Clock::time_point accepted)
      : f_(front), lim_(front->options_.limits), conn_(conn), fd_(fd), accepted_(accepted) {}
  ~HttpConnection() {
    if (ssl_) SSL_free(ssl_);
  }
  void run();

 private:
  friend class HttpResponse;
  enum class Read { kOk, kRefused, kEnd };  // kEnd: the connection ends (counted where it must be)

  bool handshake();
  // Reads the next request's head into *head (bytes after it stay buffered). `first`: the connection's first
  // request (its deadline runs from accept, and it has none to wait idle for).
  Read read_head(bool first, http::RequestHead* head, size_t* head_bytes);
  Read read_body(const http::BodyFraming& framing, size_t head_bytes, int head_fields, std::string* body);
  // Calls the route's handler with the request; true when the connection stays open for the next one.
  bool dispatch(const HttpRoute& route, const HttpRequest& req, bool close);
  // Appends up to `cap` bytes read by `deadline` to the buffer.
  Io fill(size_t cap, Clock::time_point deadline);
  std::string_view buffered() const { return std::string_view(in_).substr(pos_); }
  // Answers a refusal (counted), then lingers: the connection ends after it.
  void refuse(const http::Refusal& r);
  // Answers `status` with the front's error body and Connection: close (not counted).
  void answer_error(int status, const std::string& message, const HttpResponse::Headers& extra = {});
  // After an answer that closes the connection early: drain what the client still sends (linger_s at most),
  // so that it reads the answer rather than a reset.
  void linger();
  // Writes `bytes` within the write deadline; false (counted "write_timeout" when it timed out) otherwise.
  bool put(std::string_view bytes);
  http::HeadLimits head_limits() const {
    return http::HeadLimits{lim_.max_request_line, lim_.max_head_bytes, lim_.max_headers};
  }

  HttpFront* f_;
  const HttpFrontLimits& lim_;
  HttpFront::ConnList::iterator conn_;
  int fd_;
  Clock::time_point accepted_;
  SSL* ssl_ = nullptr;
  std::optional<http::Stream> stream_;
  std::string in_;  // bytes read, in_[pos_..] not consumed yet
  size_t pos_ = 0;
  bool head_only_ = false;  // the request being answered is a HEAD: answers carry no body
};

void HttpFront::serve_connection(ConnList::iterator conn) {
  pthread_setname_np(pthread_self(), (options_.thread_name.substr(0, 13) + "-c").c_str());
  const Clock::time_point accepted = Clock::now();
  int fd = -1;
  {
    absl::MutexLock l(&mu_);
    fd = conn->fd;
  }
  {
    HttpConnection c(this, conn, fd, accepted);
    c.run();
  }
  ERR_clear_error();
  absl::MutexLock l(&mu_);
  if (!conn->displaced && --per_address_[conn->address] == 0) per_address_.erase(conn->address);
  close(fd);  // after the books: a client that sees the close may connect again at once
  finished_.push_back(std::move(conn->thread));
  conns_.erase(conn);
}

bool HttpConnection::handshake() {
  if (f_->tls_) {
    absl::StatusOr<std::shared_ptr<http::TlsServerContext>> ctx = f_->context();
    if (!ctx.ok()) return false;  // logged once per identity
    ssl_ = SSL_new((*ctx)->ctx);
    if (!ssl_ || SSL_set_fd(ssl_, fd_) != 1) return false;
  }
  stream_.emplace(fd_, ssl_);
  const Io io = stream_->handshake(http::deadline_after(accepted_, lim_.head_timeout_s));
  if (io == Io::kOk) return true;
  if (io == Io::kTimeout) {
    f_->refuse(conn_, "head_timeout");
  } else {
    f_->handshake_failures_.fetch_add(1);
    f_->refuse(conn_, "tls_handshake");
    FROST_LOG_DEBUG("frostd: %s TLS handshake failed: %s", f_->options_.endpoint.c_str(),
                    http::ssl_error().c_str());
  }
  return false;
}

void HttpConnection::run() {
  if (!handshake()) return;
  for (bool first = true; !f_->stopping(); first = false) {
    http::RequestHead head;
    size_t head_bytes = 0;
    if (read_head(first, &head, &head_bytes) != Read::kOk) return;
    head_only_ = head.method == "HEAD";
    std::variant<http::BodyFraming, http::Refusal> framed = http::body_framing(head, lim_.max_body_bytes);
    if (auto* r = std::get_if<http::Refusal>(&framed)) return refuse(*r);
    const http::BodyFraming& framing = std::get<http::BodyFraming>(framed);
    // The route before the body: no body is read (nor 100 Continue sent) for a request nobody answers.
    std::string allow;
    const HttpRoute* route = f_->route(head.method, head.path, &allow);
    if (!route && allow.empty())
      return answer_error(404, absl::StrCat("no route ", head.method, " ", head.path));
    if (!route)
      return answer_error(
          405, absl::StrCat("method ", head.method, " is not allowed on ", head.path, " (", allow, ")"),
          {{"Allow", allow}});
    if (framing.expect_continue && framing.kind != http::BodyFraming::Kind::kNone && buffered().empty() &&
        !put("HTTP/1.1 100 Continue\r\n\r\n"))
      return;
    HttpRequest req;
    if (read_body(framing, head_bytes, static_cast<int>(head.headers.size()), &req.body) != Read::kOk) return;
    if (!f_->begin_answer(conn_)) return;  // displaced while reading (counted then)
    req.method = std::move(head.method);
    req.path = std::move(head.path);
    req.query = std::move(head.query);
    req.minor = head.minor;
    req.headers = std::move(head.headers);
    req.peer = conn_->address;
    const bool big = req.body.size() >= kTrimAfterBodyBytes;
    const bool more = dispatch(*route, req, framing.close || !lim_.keep_alive || f_->stopping());
    if (big) {
      // A large body (and what its handler built from it: a parsed document is ~10x the text) leaves freed
      // pages in this thread's malloc arena; hand them back, so a storm of big requests does not raise the
      // resident size for good.
      std::string().swap(req.body);
      malloc_trim(0);
    }
    if (!more) return;
    f_->end_answer(conn_);  // idle until the next request: displaceable again
  }
}

bool HttpConnection::dispatch(const HttpRoute& route, const HttpRequest& req, bool close) {
  HttpResponse res(this, req.method == "HEAD", req.minor >= 1, close);
  try {
    route.handler(req, res);
  } catch (
      const std::exception& e) {  // a handler bug must not take frostd down: 500, or cut a started answer
    FROST_LOG_ERROR("frostd: %s %s %s: %s", f_->options_.endpoint.c_str(), req.method.c_str(),
                    req.path.c_str(), e.what());
  } catch (...) {
    FROST_LOG_ERROR("frostd: %s %s %s: unknown exception", f_->options_.endpoint.c_str(), req.method.c_str(),
                    req.path.c_str());
  }
  switch (res.state_) {
    case HttpResponse::State::kNone:
      answer_error(500, "internal error: no answer was made");
      return false;
    case HttpResponse::State::kDone:
      if (!res.close_) return true;
      stream_->close_notify();
      shutdown(fd_, SHUT_WR);
      return false;
    default:  // broken, or a stream the handler did not finish: the client cannot tell where it ends
      return false;
  }
}

Io HttpConnection::fill(size_t cap, Clock::time_point deadline) {
  if (pos_ > 0) {
    in_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t had = in_.size();
  in_.resize(had + cap);
  size_t n = 0;
  const Io io = stream_->read(in_.data() + had, cap, &n, deadline);
  in_.resize(had + n);
  if (n > 0) {  // progress: now, unless the connection's head start (HttpFront::Conn::kFreshGrace) runs later
    const int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    if (now > conn_->progress_ns.load(std::memory_order_relaxed))
      conn_->progress_ns.store(now, std::memory_order_relaxed);
  }
  return io;
}

HttpConnection::Read HttpConnection::read_head(bool first, http::RequestHead* head, size_t* head_bytes) {
  Clock::time_point deadline = http::deadline_after(accepted_, lim_.head_timeout_s);
  if (!first) {
    // Keep-alive: wait (idle_timeout_s) for the next request's first byte; its head deadline runs from there.
    if (buffered().empty() &&
        fill(std::min<size_t>(lim_.max_head_bytes, 16384), http::deadline_in(lim_.idle_timeout_s)) != Io::kOk)
      return Read::kEnd;
    deadline = http::deadline_in(lim_.head_timeout_s);
  }
  size_t scanned = 0;
  for (;;) {
    while (pos_ < in_.size() && (in_[pos_] == '\r' || in_[pos_] == '\n')) ++pos_;  // empty lines before it
    const std::string_view buf = buffered();
    if (!buf.empty()) {
      if (const size_t end = http::find_head_end(buf, &scanned)) {
        std::variant<http::RequestHead, http::Refusal> parsed =
            http::parse_request_head(buf.substr(0, end), head_limits());
        if (auto* r = std::get_if<http::Refusal>(&parsed)) {
          refuse(*r);
          return Read::kRefused;
        }
        *head = std::get<http::RequestHead>(std::move(parsed));
        *head_bytes = end;
        pos_ += end;
        return Read::kOk;
      }
      if (std::optional<http::Refusal> r = http::check_incomplete_head(buf, head_limits())) {
        refuse(*r);
        return Read::kRefused;
      }
    }
    // Never more than the head limit buffered: 431 once it is reached without the head's end.
    const Io io = fill(std::min<size_t>(lim_.max_head_bytes - buf.size(), 16384), deadline);
    if (io == Io::kTimeout) f_->refuse(conn_, "head_timeout");
    if (io != Io::kOk) return Read::kEnd;  // else the client went away (or was displaced: counted then)
  }
}

HttpConnection::Read HttpConnection::read_body(const http::BodyFraming& framing, size_t head_bytes,
                                               int head_fields, std::string* body) {
  if (framing.kind == http::BodyFraming::Kind::kNone) return Read::kOk;
  const Clock::time_point deadline = http::deadline_in(lim_.body_timeout_s);
  http::ContentDecoder decoder(framing.coding, lim_.max_body_bytes);
  http::ChunkedDecoder chunked(lim_.max_body_bytes, head_limits(), head_bytes, head_fields);
  uint64_t left = framing.length;  // kLength: never read past the body (the next request's bytes stay unread)
  std::string piece;
  for (;;) {
    if (framing.kind == http::BodyFraming::Kind::kLength) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(left, buffered().size()));
      if (std::optional<http::Refusal> r = decoder.feed(buffered().substr(0, take), body)) {
        refuse(*r);
        return Read::kRefused;
      }
      pos_ += take;
      left -= take;
      if (left == 0) break;
    } else {
      size_t used = 0;
      piece.clear();
      std::optional<http::Refusal> r = chunked.feed(buffered(), &used, &piece);
      pos_ += used;
      if (!r) r = decoder.feed(piece, body);
      if (r) {
        refuse(*r);
        return Read::kRefused;
      }
      if (chunked.done()) break;
    }
    const size_t cap = framing.kind == http::BodyFraming::Kind::kLength
                           ? static_cast<size_t>(std::min<uint64_t>(left, 65536))
                           : 65536;
    const Io io = fill(cap, deadline);
    if (io == Io::kTimeout) {
      f_->refuse(conn_, "body_timeout");
      answer_error(408, absl::StrCat("the request body did not arrive within ", lim_.body_timeout_s, " s"));
      return Read::kEnd;
    }
    if (io != Io::kOk) return Read::kEnd;
  }
  if (std::optional<http::Refusal> r = decoder.finish()) {
    refuse(*r);
    return Read::kRefused;
  }
  return Read::kOk;
}

bool HttpConnection::put(std::string_view bytes) {
  const Io io = stream_->write_all(bytes, http::deadline_in(lim_.write_timeout_s));
  if (io == Io::kTimeout) f_->refuse(conn_, "write_timeout");
  return io == Io::kOk;
}

void HttpConnection::answer_error(int status, const std::string& message,
                                  const HttpResponse::Headers& extra) {
  if (!f_->begin_answer(conn_)) return;  // displaced meanwhile
  const HttpErrorBody b = f_->error_body(status, message);
  HttpResponse::Headers fields = {{"Content-Type", b.content_type},
                                  {"Content-Length", absl::StrCat(b.body.size())},
                                  {"Connection", "close"}};
  fields.insert(fields.end(), extra.begin(), extra.end());
  if (!put(http::response_head(status, fields) + (head_only_ ? "" : b.body))) return;
  f_->answered_.fetch_add(1);
  linger();
}

void HttpConnection::refuse(const http::Refusal& r) {
  f_->refuse(conn_, r.reason);
  answer_error(r.status, r.message);
}

void HttpConnection::linger() {
  f_->end_answer(conn_, /*lingering=*/true);  // answered: displaceable (first) while it drains
  stream_->close_notify();
  shutdown(fd_, SHUT_WR);
  const Clock::time_point deadline = http::deadline_in(lim_.linger_s);
  char buf[16384];
  for (size_t drained = 0; drained < (size_t{4} << 20);) {
    size_t n = 0;
    if (stream_->read(buf, sizeof(buf), &n, deadline) != Io::kOk) break;
    drained += n;
  }
}

// ---- HttpResponse

bool HttpResponse::put(std::string_view bytes) {
  if (state_ == State::kBroken) return false;
  if (!conn_->put(bytes)) {
    state_ = State::kBroken;
    return false;
  }
  return true;
}

bool HttpResponse::send(int status, std::string_view content_type, std::string_view body,
                        const Headers& extra) {
  if (state_ != State::kNone) return false;
  Headers fields = {{"Content-Type", std::string(content_type)},
                    {"Content-Length", absl::StrCat(body.size())}};
  fields.insert(fields.end(), extra.begin(), extra.end());
  if (close_) fields.push_back({"Connection", "close"});
  std::string out = http::response_head(status, fields);
  if (!head_only_) out.append(body);
  if (!put(out)) return false;
  state_ = State::kDone;
  conn_->f_->answered_.fetch_add(1);
  return true;
}

bool HttpResponse::start(int status, std::string_view content_type, const Headers& extra) {
  if (state_ != State::kNone) return false;
  Headers fields = {{"Content-Type", std::string(content_type)}};
  fields.insert(fields.end(), extra.begin(), extra.end());
  if (chunked_) {
    fields.push_back({"Transfer-Encoding", "chunked"});
  } else {
    close_ = true;  // HTTP/1.0: the body ends with the connection
  }
  if (close_) fields.push_back({"Connection", "close"});
  if (!put(http::response_head(status, fields))) return false;
  state_ = State::kStreaming;
  return true;
}

bool HttpResponse::write(std::string_view bytes) {
  if (state_ != State::kStreaming) return false;
  if (bytes.empty() || head_only_) return true;
  if (!chunked_) return put(bytes);
  std::string chunk = absl::StrCat(absl::Hex(bytes.size()), "\r\n");
  chunk.append(bytes.data(), bytes.size());
  chunk += "\r\n";
  return put(chunk);
}

bool HttpResponse::finish() {
  if (state_ != State::kStreaming) return false;
  if (chunked_ && !head_only_ && !put("0\r\n\r\n")) return false;
  state_ = State::kDone;
  conn_->f_->answered_.fetch_add(1);
  return true;
}

bool HttpResponse::client_gone() const {
  return state_ == State::kBroken || conn_->f_->stopping() || conn_->stream_->peer_gone();
}

}  // namespace frost::server
