// HttpFront (server/http_front.h), frostd's HTTP/1.1 server, over real sockets on 127.0.0.1 port 0 with
// scaled down limits: one test per behaviour of issue 48 — heads cut at their deadline or refused (431)
// before they are buffered, bodies refused (413) before or while they are read (declared, chunked, inflated),
// Expect, the RFC 9112 framing refusals (each answered with a message), pipelining in order, the per-address
// and global caps with displacement, client_gone() and stop(). The OpenAI API on top of it is driven by
// tests/client/openai_*.mjs; the framing rules alone by http_wire_test.cc.
#include "server/http_front.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace frost::server {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// A client connection from `from` (any 127.x.y.z is loopback on Linux), reading responses as they come.
class Client {
 public:
  Client(int port, const char* from = "127.0.0.1") {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, from, &src.sin_addr);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(port));
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0 ||
        connect(fd_, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }
  bool send(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Whether bytes (or a close) can be read now.
  bool readable(int timeout_ms = 0) {
    if (!buf_.empty()) return true;
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, timeout_ms) > 0;
  }
  // One response (a 1xx one on its own), chunked bodies decoded; nothing when the connection closed first or
  // `timeout_s` passed.
  std::optional<Response> read_response(double timeout_s = 2) {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!more(deadline)) return std::nullopt;
    Response r;
    const std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    r.status = std::atoi(head.substr(9, 3).c_str());
    for (size_t at = head.find("\r\n"); at != std::string::npos;) {
      const size_t next = head.find("\r\n", at + 2);
      const std::string line =
          head.substr(at + 2, next == std::string::npos ? std::string::npos : next - at - 2);
      const size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
      at = next;
    }
    if (r.status < 200) return r;
    if (r.headers["transfer-encoding"] == "chunked") {
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos)
          if (!more(deadline)) return std::nullopt;
        const size_t n = std::strtoul(buf_.substr(0, eol).c_str(), nullptr, 16);
        while (buf_.size() < eol + 2 + n + 2)
          if (!more(deadline)) return std::nullopt;
        r.body += buf_.substr(eol + 2, n);
        buf_.erase(0, eol + 2 + n + 2);
        if (n == 0) return r;
      }
    }
    if (r.headers.count("content-length")) {
      const size_t n = std::strtoul(r.headers["content-length"].c_str(), nullptr, 10);
      while (buf_.size() < n)
        if (!more(deadline)) return std::nullopt;
      r.body = buf_.substr(0, n);
      buf_.erase(0, n);
      return r;
    }
    while (more(deadline)) {
    }
    r.body = std::move(buf_);
    buf_.clear();
    return r;
  }
  // Everything that arrives until the server closes the connection (or `timeout_s` passes).
  std::string read_all(double timeout_s) {
    closed_within(timeout_s);
    std::string out = std::move(buf_);
    buf_.clear();
    return out;
  }
  // Waits (up to `timeout_s`) for the server to close the connection, keeping what arrives before it.
  bool closed_within(double timeout_s) {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    while (!closed_ && Clock::now() < deadline) more(deadline);
    return closed_;
  }

 private:
  bool more(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char buf[65536];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buf_.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  std::string buf_;
  bool closed_ = false;
};

// `n` zero bytes as gzip (windowBits 31) or zlib (15) / raw deflate (-15), compressed a MiB at a time.
std::string compress_zeros(size_t n, int window_bits) {
  z_stream zs{};
  deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, window_bits, 9, Z_DEFAULT_STRATEGY);
  const std::string zeros(1 << 20, '\0');
  std::string out;
  unsigned char buf[65536];
  for (size_t done = 0; done < n || zs.avail_in > 0;) {
    if (zs.avail_in == 0) {
      const size_t take = std::min(zeros.size(), n - done);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(zeros.data()));
      zs.avail_in = static_cast<uInt>(take);
      done += take;
    }
    zs.next_out = buf;
    zs.avail_out = sizeof(buf);
    deflate(&zs, Z_NO_FLUSH);
    out.append(reinterpret_cast<char*>(buf), sizeof(buf) - zs.avail_out);
  }
  for (int rc = Z_OK; rc != Z_STREAM_END;) {
    zs.next_out = buf;
    zs.avail_out = sizeof(buf);
    rc = deflate(&zs, Z_FINISH);
    out.append(reinterpret_cast<char*>(buf), sizeof(buf) - zs.avail_out);
  }
  deflateEnd(&zs);
  return out;
}
std::string compress_text(const std::string& text, int window_bits) {
  z_stream zs{};
  deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, text.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(out.size() - zs.avail_out);
  deflateEnd(&zs);
  return out;
}

int64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return -1;
}

class HttpFrontTest : public ::testing::Test {
 protected:
  void SetUp() override { signal(SIGPIPE, SIG_IGN); }
  void TearDown() override {
    if (front_) front_->stop();
  }
  // Small limits: heads of 4 KiB within 1 s, bodies of 64 KiB within 1 s, everything else within a second.
  static HttpFrontLimits Small() {
    HttpFrontLimits l;
    l.max_connections = 16;
    l.max_connections_per_address = 4;
    l.max_head_bytes = 4096;
    l.max_request_line = 1024;
    l.max_headers = 20;
    l.max_body_bytes = 64 << 10;
    l.head_timeout_s = 1;
    l.body_timeout_s = 1;
    l.idle_timeout_s = 1;
    l.write_timeout_s = 1;
    l.linger_s = 0.5;
    return l;
  }
  void Start(HttpFrontLimits lim = Small()) {
    HttpFrontOptions o;
    o.listen_field = "test.listen";
    o.limits = lim;
    o.routes = {
        {"GET", "/hello",
         [](const HttpRequest& req, HttpResponse& res) {
           res.send(200, "text/plain", "hello " + req.query);
         }},
        {"POST", "/echo",
         [](const HttpRequest& req, HttpResponse& res) { res.send(200, "text/plain", req.body); }},
        {"GET", "/stream",
         [](const HttpRequest&, HttpResponse& res) {
           res.start(200, "text/event-stream");
           for (const char* piece : {"a", "bb", "ccc"}) res.write(piece);
           res.finish();
         }},
        {"GET", "/wait",
         [this](const HttpRequest&, HttpResponse& res) {
           const Clock::time_point t0 = Clock::now();
           while (!res.client_gone() && seconds_since(t0) < 5)
             std::this_thread::sleep_for(std::chrono::milliseconds(5));
           gone_after_s_ = seconds_since(t0);
           res.send(200, "text/plain", "late");
         }},
    };
    o.on_refused = [this](const char* reason) {
      std::lock_guard<std::mutex> l(mu_);
      ++refused_[reason];
    };
    absl::StatusOr<std::unique_ptr<HttpFront>> f = HttpFront::start("127.0.0.1:0", nullptr, std::move(o));
    ASSERT_TRUE(f.ok()) << f.status();
    front_ = *std::move(f);
  }
  int Refused(const std::string& reason) {
    std::lock_guard<std::mutex> l(mu_);
    return refused_[reason];
  }
  std::unique_ptr<Client> Connect(const char* from = "127.0.0.1") {
    auto c = std::make_unique<Client>(front_->port(), from);
    EXPECT_GE(c->fd(), 0);
    return c;
  }
  // Sends `request` on a new connection and reads one response; expects a refusal: `status`, a message in the
  // body, and Connection: close.
  Response ExpectRefused(const std::string& request, int status) {
    std::unique_ptr<Client> c = Connect();
    EXPECT_TRUE(c->send(request));
    std::optional<Response> r = c->read_response();
    EXPECT_TRUE(r.has_value()) << request;
    if (!r) return Response{};
    EXPECT_EQ(r->status, status) << request << "\n" << r->body;
    EXPECT_GT(r->body.size(), 10u) << "no message for " << request;
    EXPECT_EQ(r->headers["connection"], "close") << request;
    EXPECT_TRUE(c->closed_within(1.0)) << request;
    return *r;
  }

  std::unique_ptr<HttpFront> front_;
  std::mutex mu_;
  std::map<std::string, int> refused_;
  std::atomic<double> gone_after_s_{-1};
};

TEST_F(HttpFrontTest, AnswersRoutesKeepAliveAndStreams) {
  Start();
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(c->send("GET /hello?x HTTP/1.1\r\nHost: a\r\n\r\n"));
  std::optional<Response> r = c->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello x");
  ASSERT_TRUE(c->send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n"));  // same connection
  r = c->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(r->body, "abbccc");
  ASSERT_TRUE(c->send("GET /nope HTTP/1.1\r\n\r\n"));
  r = c->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_NE(r->body.find("no route GET /nope"), std::string::npos) << r->body;
  const Response m = ExpectRefused("DELETE /hello HTTP/1.1\r\n\r\n", 405);
  EXPECT_NE(m.body.find("DELETE"), std::string::npos) << m.body;
  EXPECT_EQ(m.headers.at("allow"), "GET");
  // HEAD: the head of the answer only (its Content-Length says what a GET would get).
  std::unique_ptr<Client> h = Connect();
  ASSERT_TRUE(h->send("HEAD /nope HTTP/1.1\r\n\r\n"));
  const std::string raw = h->read_all(1.0);
  EXPECT_EQ(raw.rfind("HTTP/1.1 404", 0), 0u) << raw;
  EXPECT_EQ(raw.substr(raw.find("\r\n\r\n") + 4), "") << raw;
  EXPECT_EQ(front_->refused(), 0);
}

// The head deadline runs from accept; a byte every 50 ms does not extend it.
TEST_F(HttpFrontTest, SlowHeadIsCutAtTheDeadline) {
  HttpFrontLimits lim = Small();
  lim.head_timeout_s = 0.6;
  Start(lim);
  std::unique_ptr<Client> c = Connect();
  const Clock::time_point t0 = Clock::now();
  const std::string head = "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n";
  double closed = -1;
  for (size_t i = 0; seconds_since(t0) < 2.0; ++i) {
    if (c->readable(50)) {
      closed = seconds_since(t0);
      break;
    }
    c->send(head.substr(i % head.size(), 1));
  }
  EXPECT_TRUE(c->closed_within(0.1));
  EXPECT_GE(closed, 0.55);
  EXPECT_LT(closed, 1.0);
  EXPECT_EQ(Refused("head_timeout"), 1);
}

// 431 as soon as the head limit is reached: the server answers while the client is still sending its 1 MiB of
// headers, having buffered no more than the limit.
TEST_F(HttpFrontTest, HugeHeadGets431BeforeItIsAllSent) {
  Start();
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(c->send("GET /hello HTTP/1.1\r\n"));
  size_t sent = 0;
  const std::string line = "X-Pad: " + std::string(1000, 'a') + "\r\n";
  while (sent < (1u << 20) && !c->readable(1)) {
    if (::send(c->fd(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT) <= 0) break;
    sent += line.size();
  }
  EXPECT_LT(sent, 256u << 10) << "the answer came only after " << sent << " bytes";
  std::optional<Response> r = c->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_NE(r->body.find("4096"), std::string::npos) << r->body;
  EXPECT_EQ(Refused("head_too_large"), 1);
}

TEST_F(HttpFrontTest, TooManyHeaderFieldsGet431) {
  Start();
  std::string req = "GET /hello HTTP/1.1\r\n";
  for (int i = 0; i < 25; ++i) req += "X-" + std::to_string(i) + ": v\r\n";
  const Response r = ExpectRefused(req + "\r\n", 431);
  EXPECT_NE(r.body.find("header fields"), std::string::npos) << r.body;
}

// A declared Content-Length over the limit: 413 at once, the body never sent.
TEST_F(HttpFrontTest, DeclaredBodyOverTheLimitGets413WithoutReadingIt) {
  Start();
  const Clock::time_point t0 = Clock::now();
  const Response r =
      ExpectRefused("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 268435456\r\n\r\n", 413);
  EXPECT_LT(seconds_since(t0), 0.5);
  EXPECT_NE(r.body.find("268435456"), std::string::npos) << r.body;
  EXPECT_EQ(Refused("body_too_large"), 1);
}

TEST_F(HttpFrontTest, ExpectContinue) {
  Start();
  // Over the limit: 413 instead of 100 Continue.
  Response r =
      ExpectRefused("POST /echo HTTP/1.1\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n", 413);
  // Under it: 100 Continue, then the answer once the body came.
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(c->send("POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  std::optional<Response> cont = c->read_response();
  ASSERT_TRUE(cont);
  EXPECT_EQ(cont->status, 100);
  ASSERT_TRUE(c->send("hello"));
  std::optional<Response> ok = c->read_response();
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, "hello");
  // Any other expectation: 417.
  r = ExpectRefused("POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: something-else\r\n\r\nhello", 417);
  EXPECT_NE(r.body.find("something-else"), std::string::npos) << r.body;
}

// Chunks past the limit: 413 while the client is still sending.
TEST_F(HttpFrontTest, ChunkedBodyOverTheLimitGets413WhileItArrives) {
  Start();
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(c->send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "1000\r\n" + std::string(4096, 'x') + "\r\n";
  size_t sent = 0;
  while (sent < (4u << 20) && !c->readable(1)) {
    if (::send(c->fd(), chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT) <= 0) break;
    sent += 4096;
  }
  EXPECT_LT(sent, 1u << 20) << "the answer came only after " << sent << " bytes";
  std::optional<Response> r = c->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("chunked"), std::string::npos) << r->body;
  // Under the limit, split in odd places, with an extension and a trailer: decoded.
  std::unique_ptr<Client> d = Connect();
  ASSERT_TRUE(d->send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nab"));
  ASSERT_TRUE(d->send("c\r\n4\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\n"));
  r = d->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "abcdefg");
}

TEST_F(HttpFrontTest, BadChunkSizeGets400) {
  Start();
  const Response r =
      ExpectRefused("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400);
  EXPECT_NE(r.body.find("chunk-size"), std::string::npos) << r.body;
}

// 64 MiB of zeros gzipped (~64 KiB) against a 1 MiB limit: 413 as soon as the inflated size passes it, fast,
// and the server's memory does not grow by the inflated size.
TEST_F(HttpFrontTest, GzipBombGets413WithoutInflatingIt) {
  HttpFrontLimits lim = Small();
  lim.max_body_bytes = 1 << 20;
  Start(lim);
  const std::string bomb = compress_zeros(size_t{64} << 20, 15 + 16);
  ASSERT_LT(bomb.size(), 1u << 20);
  const int64_t rss0 = rss_kib();
  const Clock::time_point t0 = Clock::now();
  const Response r = ExpectRefused("POST /echo HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: " +
                                       std::to_string(bomb.size()) + "\r\n\r\n" + bomb,
                                   413);
  EXPECT_LT(seconds_since(t0), 1.5);
  EXPECT_NE(r.body.find("gzip"), std::string::npos) << r.body;
  EXPECT_LT(rss_kib() - rss0, 16 << 10) << "RSS grew by more than 16 MiB";
  EXPECT_EQ(Refused("body_too_large"), 1);
}

TEST_F(HttpFrontTest, DeflateAndGzipUnderTheLimitAreInflated) {
  Start();
  std::string text;
  for (int i = 0; text.size() < 50000; ++i) text += "line " + std::to_string(i) + "\n";
  for (const auto& [coding, bits] :
       std::vector<std::pair<std::string, int>>{{"deflate", 15}, {"deflate", -15}, {"gzip", 31}}) {
    const std::string z = compress_text(text, bits);
    std::unique_ptr<Client> c = Connect();
    ASSERT_TRUE(c->send("POST /echo HTTP/1.1\r\nContent-Encoding: " + coding +
                        "\r\nContent-Length: " + std::to_string(z.size()) + "\r\n\r\n" + z));
    std::optional<Response> r = c->read_response();
    ASSERT_TRUE(r) << coding << " " << bits;
    EXPECT_EQ(r->status, 200) << coding << " " << bits << ": " << r->body;
    EXPECT_EQ(r->body, text) << coding << " " << bits;
  }
  // Truncated: 400.
  const std::string z = compress_text(text, 31);
  const Response r = ExpectRefused(
      "POST /echo HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 20\r\n\r\n" + z.substr(0, 20), 400);
  EXPECT_NE(r.body.find("truncated"), std::string::npos) << r.body;
}

TEST_F(HttpFrontTest, OtherContentEncodingsGet415) {
  Start();
  const Response r =
      ExpectRefused("POST /echo HTTP/1.1\r\nContent-Encoding: br\r\nContent-Length: 4\r\n\r\nabcd", 415);
  EXPECT_NE(r.body.find("\"br\""), std::string::npos) << r.body;
  EXPECT_EQ(Refused("unsupported_encoding"), 1);
}

TEST_F(HttpFrontTest, TwoDifferentContentLengthsGet400) {
  Start();
  const Response r =
      ExpectRefused("POST /echo HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400);
  EXPECT_NE(r.body.find("two different Content-Length"), std::string::npos) << r.body;
  // The same value twice is one length.
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(c->send("POST /echo HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"));
  std::optional<Response> ok = c->read_response();
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->body, "hello");
}

TEST_F(HttpFrontTest, TransferEncodingWithContentLengthGets400) {
  Start();
  const Response r = ExpectRefused(
      "POST /echo HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      400);
  EXPECT_NE(r.body.find("both Transfer-Encoding and Content-Length"), std::string::npos) << r.body;
}

TEST_F(HttpFrontTest, ObsFoldGets400) {
  Start();
  const Response r = ExpectRefused("GET /hello HTTP/1.1\r\nX-A: one\r\n  two\r\n\r\n", 400);
  EXPECT_NE(r.body.find("obs-fold"), std::string::npos) << r.body;
}

// Every other framing refusal of RFC 9112 the front makes: the status, and a message that says what was
// wrong.
TEST_F(HttpFrontTest, FramingRefusalsSayWhatWasWrong) {
  Start();
  struct Case {
    std::string request;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"GARBAGE\r\n\r\n", 400, "bad request line"},
      {"GET /hello HTTP/1.x\r\n\r\n", 400, "bad HTTP version"},
      {"GET /hello HTTP/2.0\r\n\r\n", 505, "not supported"},
      {"GET hello HTTP/1.1\r\n\r\n", 400, "bad request target"},
      {"GET /" + std::string(2000, 'a') + " HTTP/1.1\r\n\r\n", 414, "request line"},
      {"GET /hello HTTP/1.1\r\nHost : a\r\n\r\n", 400,
       "whitespace between the header field name and the colon"},
      {"GET /hello HTTP/1.1\r\nNoColon\r\n\r\n", 400, "without a colon"},
      {"POST /echo HTTP/1.1\r\nContent-Length: 5x\r\n\r\nhello", 400, "not a number"},
      {"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "HTTP/1.0"},
      {"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501, "gzip"},
      {"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400, "not chunked"},
      {"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\n0\r\n\r\n", 400, "chunk"},
  };
  for (const Case& c : cases) {
    const Response r = ExpectRefused(c.request, c.status);
    EXPECT_NE(r.body.find(c.says), std::string::npos) << c.request.substr(0, 60) << " → " << r.body;
  }
  EXPECT_EQ(front_->rejected(), static_cast<int64_t>(cases.size()));
}

// Three requests in one write, on one connection: three answers, in order.
TEST_F(HttpFrontTest, PipelinedRequestsAreAnsweredInOrder) {
  Start();
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(
      c->send("GET /hello?1 HTTP/1.1\r\nHost: a\r\n\r\n"
              "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\nsecond!"
              "GET /hello?3 HTTP/1.1\r\nHost: a\r\n\r\n"));
  for (const char* want : {"hello 1", "second!", "hello 3"}) {
    std::optional<Response> r = c->read_response();
    ASSERT_TRUE(r) << want;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, want);
  }
  // Connection: close is honoured.
  ASSERT_TRUE(c->send("GET /hello?4 HTTP/1.1\r\nConnection: close\r\n\r\n"));
  std::optional<Response> r = c->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->headers["connection"], "close");
  EXPECT_TRUE(c->closed_within(1.0));
}

// The per-address cap: with 4 tricklers of 127.0.0.1 at the cap, a new client from the same address still
// gets its answer at once, and the trickler idle for longest is the one cut.
TEST_F(HttpFrontTest, PerAddressCapDisplacesTricklers) {
  Start();
  std::vector<std::unique_ptr<Client>> tricklers;
  for (int i = 0; i < 4; ++i) {
    tricklers.push_back(Connect());
    ASSERT_TRUE(tricklers.back()->send("GET /hello HTTP/1.1\r\nHo"));
    // Apart in time, so that "idle for longest" (the displacement order) is their order.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(front_->open_connections(), 4);
  ASSERT_TRUE(tricklers[0]->send("st"));  // the oldest makes progress: now [1] has been quiet for longest
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const Clock::time_point t0 = Clock::now();
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(c->send("GET /hello?me HTTP/1.1\r\n\r\n"));
  std::optional<Response> r = c->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "hello me");
  EXPECT_LT(seconds_since(t0), 0.5);
  EXPECT_TRUE(tricklers[1]->closed_within(0.5)) << "the one quiet for longest was not the one displaced";
  for (int i : {0, 2, 3}) EXPECT_FALSE(tricklers[i]->readable(0)) << i;
  EXPECT_EQ(Refused("address_limit"), 1);
}

// The global cap: a client from a new address displaces the oldest idle connection of the busiest address;
// when every connection is being answered, the new one is closed at once.
TEST_F(HttpFrontTest, GlobalCapDisplacesOrRefuses) {
  HttpFrontLimits lim = Small();
  lim.max_connections = 3;
  Start(lim);
  std::vector<std::unique_ptr<Client>> held;
  for (const char* from : {"127.0.0.3", "127.0.0.2", "127.0.0.2"}) held.push_back(Connect(from));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::unique_ptr<Client> c = Connect("127.0.0.4");
  ASSERT_TRUE(c->send("GET /hello HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(c->read_response());
  EXPECT_TRUE(held[1]->closed_within(0.5));
  EXPECT_EQ(Refused("connection_limit"), 1);
  // Three handlers waiting on /wait: nothing to displace, the fourth gets a 503 naming the cap, and is closed.
  std::vector<std::unique_ptr<Client>> busy;
  held.clear();
  c.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int i = 0; i < 3; ++i) {
    busy.push_back(Connect("127.0.0.5"));
    ASSERT_TRUE(busy.back()->send("GET /wait HTTP/1.1\r\n\r\n"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::unique_ptr<Client> late = Connect("127.0.0.6");
  ASSERT_TRUE(late->send("GET /hello HTTP/1.1\r\n\r\n"));
  std::optional<Response> r = late->read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("server.http.max_connections"), std::string::npos) << r->body;
  EXPECT_TRUE(late->closed_within(0.5));
  EXPECT_EQ(Refused("connection_limit"), 2);
}

// client_gone(): a handler waiting for its data sees the client go within a few polls; stop() ends it too.
TEST_F(HttpFrontTest, HandlerSeesTheClientGoAndStop) {
  Start();
  {
    std::unique_ptr<Client> c = Connect();
    ASSERT_TRUE(c->send("GET /wait HTTP/1.1\r\n\r\n"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }  // closed
  for (int i = 0; i < 100 && gone_after_s_.load() < 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(gone_after_s_.load(), 0.05);
  EXPECT_LT(gone_after_s_.load(), 0.5);
  gone_after_s_ = -1;
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(c->send("GET /wait HTTP/1.1\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const Clock::time_point t0 = Clock::now();
  front_->stop();
  EXPECT_LT(seconds_since(t0), 0.5);
  EXPECT_GE(gone_after_s_.load(), 0);
  EXPECT_TRUE(c->closed_within(0.5));
}

// Keep-alive: an idle connection is closed quietly after idle_timeout_s (not a refusal).
TEST_F(HttpFrontTest, IdleKeepAliveConnectionIsClosed) {
  HttpFrontLimits lim = Small();
  lim.idle_timeout_s = 0.3;
  Start(lim);
  std::unique_ptr<Client> c = Connect();
  ASSERT_TRUE(c->send("GET /hello HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(c->read_response());
  const Clock::time_point t0 = Clock::now();
  EXPECT_TRUE(c->closed_within(1.0));
  EXPECT_GE(seconds_since(t0), 0.25);
  EXPECT_EQ(front_->refused(), 0);
}

}  // namespace
}  // namespace frost::server
