// MetricsHttpServer (server/metrics_https.h), the /metrics server of frostd, plaintext and TLS: what it
// answers, and that slow or excess clients cannot starve a scraper (issue 42): many connections trickling a
// request head a byte every 200 ms, from 127.0.0.2 and from the scraper's own 127.0.0.1, while a scrape is
// answered within a second; the trickling connections cut by the head deadline (scaled down to 1.5 s here);
// connections over the per-address and global caps displacing the oldest still reading their head, or closed
// at once when every competitor is already answering; a client that does not read its answer cut by the write
// deadline. Each refusal is counted by reason. frostd's own endpoints are driven by
// tests/client/metrics_slow_clients_test.py.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics_https.h"
#include "server/server_config.h"
#include "server/tls.h"
#include "tests/testing/test_util.h"

namespace frost::server {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const std::string kBody = "# TYPE test_up gauge\ntest_up 1\n";

// A TCP connection to 127.0.0.1:port from source address `from` (any 127.x.y.z is loopback on Linux).
int connect_from(const char* from, int port, int rcvbuf = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, from, &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the peer has closed `fd` (EOF or reset), looking without consuming or waiting.
bool peer_closed(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  return false;  // data (a TLS alert, an answer): not closed yet
}

// Like peer_closed, consuming what arrived (a TLS 1.3 server's session tickets would otherwise hide the
// close from a peek; the tricklers never read through their TLS session, so consuming it is harmless).
bool drain_closed(int fd) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

// A self-signed certificate for localhost / 127.0.0.1, made with the openssl CLI.
struct Identity {
  testing::TempDir dir{"frost_metrics_http"};
  bool ok = false;
  Identity() {
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " +
        dir.file("key.pem") + " -out " + dir.file("cert.pem") +
        " -days 2 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1 >" + dir.file("openssl.log") +
        " 2>&1";
    ok = std::system(cmd.c_str()) == 0;
  }
};

// One client connection, plain or TLS (no verification: the server's certificate is not what is tested).
class Client {
 public:
  Client(int fd, SSL_CTX* ctx) : fd_(fd) {
    if (ctx && fd >= 0) {
      ssl_ = SSL_new(ctx);
      SSL_set_fd(ssl_, fd);
    }
  }
  ~Client() {
    if (ssl_) SSL_free(ssl_);
    if (fd_ >= 0) close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int fd() const { return fd_; }
  bool handshake() { return !ssl_ || SSL_connect(ssl_) == 1; }
  bool send(const std::string& s) {
    if (ssl_) return SSL_write(ssl_, s.data(), static_cast<int>(s.size())) == static_cast<int>(s.size());
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Up to `n` bytes of the answer (blocking); what read() / SSL_read() returned.
  int read_some(char* buf, int n) {
    return ssl_ ? SSL_read(ssl_, buf, n) : static_cast<int>(recv(fd_, buf, static_cast<size_t>(n), 0));
  }
  // Everything until the server closes (a receive timeout of `timeout_s` per read).
  std::string read_all(double timeout_s) {
    timeval tv{static_cast<time_t>(timeout_s),
               static_cast<suseconds_t>((timeout_s - static_cast<int>(timeout_s)) * 1e6)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string out;
    char buf[16384];
    for (;;) {
      const int n =
          ssl_ ? SSL_read(ssl_, buf, sizeof(buf)) : static_cast<int>(recv(fd_, buf, sizeof(buf), 0));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_;
  SSL* ssl_ = nullptr;
};

const std::string kSlowHead =
    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow-loris-test\r\n\r\n";
// What a client that stalls a TLS handshake sends: a handshake record header announcing 16 KiB, then zeros.
const std::string kTlsStall = std::string("\x16\x03\x01\x3f\xff", 5) + std::string(64, '\0');

// Connections that send one byte every 200 ms, watched every 10 ms for the server closing them.
class Tricklers {
 public:
  struct Conn {
    std::unique_ptr<Client> client;
    Clock::time_point opened;
    double closed_after_s = -1;  // seconds from `opened` to the close seen; -1 while open
    bool raw = true;             // bytes written to the socket as they are; else through the client's TLS
    std::string bytes;           // what it trickles (never all of it: the head stays incomplete)
    size_t sent = 0;
  };

  ~Tricklers() { stop(); }

  // Starts trickling `bytes` on `client`: raw to the socket, or through its TLS session (handshake done).
  void add(std::unique_ptr<Client> client, bool raw, const std::string& bytes) {
    std::lock_guard<std::mutex> l(mu_);
    Conn c;
    c.opened = Clock::now();
    c.raw = raw;
    c.bytes = bytes;
    c.client = std::move(client);
    conns_.push_back(std::move(c));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Waits (up to `timeout_s`) until every connection is closed; how many still are open.
  int wait_all_closed(double timeout_s) {
    const Clock::time_point t0 = Clock::now();
    for (;;) {
      const int n = open();
      if (n == 0 || seconds_since(t0) > timeout_s) return n;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  int open() {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int>(
        std::count_if(conns_.begin(), conns_.end(), [](const Conn& c) { return c.closed_after_s < 0; }));
  }
  std::vector<double> closed_after() {  // per connection, in the order added
    std::lock_guard<std::mutex> l(mu_);
    std::vector<double> out;
    for (const Conn& c : conns_) out.push_back(c.closed_after_s);
    return out;
  }

 private:
  void run() {
    Clock::time_point next_byte = Clock::now();
    while (!stop_) {
      const bool tick = Clock::now() >= next_byte;
      if (tick) next_byte += std::chrono::milliseconds(200);
      {
        std::lock_guard<std::mutex> l(mu_);
        for (Conn& c : conns_) {
          if (c.closed_after_s >= 0) continue;
          if (drain_closed(c.client->fd())) {
            c.closed_after_s = seconds_since(c.opened);
            continue;
          }
          if (!tick) continue;
          const size_t i = std::min(c.sent, c.bytes.size() - 3);  // the last bytes never
          const bool sent = c.raw ? ::send(c.client->fd(), c.bytes.data() + i, 1, MSG_NOSIGNAL) == 1
                                  : c.client->send(c.bytes.substr(i, 1));
          if (!sent) {
            c.closed_after_s = seconds_since(c.opened);
          } else {
            ++c.sent;
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::mutex mu_;
  std::vector<Conn> conns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class MetricsHttpServerTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // frostd ignores it too (server/main.cc); OpenSSL writes with write()
    if (GetParam()) {
      if (!identity_.ok) GTEST_SKIP() << "the openssl CLI could not make a certificate";
      TlsSection t;
      t.cert_file = identity_.dir.file("cert.pem");
      t.key_file = identity_.dir.file("key.pem");
      absl::StatusOr<std::unique_ptr<TlsReloader>> tls = TlsReloader::create(t);
      ASSERT_TRUE(tls.ok()) << tls.status();
      tls_ = *std::move(tls);
      client_ctx_ = SSL_CTX_new(TLS_client_method());
      SSL_CTX_set_verify(client_ctx_, SSL_VERIFY_NONE, nullptr);
    }
  }
  void TearDown() override {
    if (server_) server_->stop();
    server_.reset();
    if (client_ctx_) SSL_CTX_free(client_ctx_);
  }

  void Start(
      MetricsHttpLimits limits, std::function<std::string()> render = [] { return kBody; }) {
    MetricsHttpOptions o;
    o.limits = limits;
    o.on_refused = [this](const char* reason) {
      std::lock_guard<std::mutex> l(mu_);
      ++refused_[reason];
    };
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> s =
        MetricsHttpServer::start("127.0.0.1:0", tls_.get(), std::move(render), std::move(o));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  int Refused(const std::string& reason) {
    std::lock_guard<std::mutex> l(mu_);
    return refused_[reason];
  }
  std::unique_ptr<Client> Connect(const char* from, int rcvbuf = 0) {
    return std::make_unique<Client>(connect_from(from, server_->port(), rcvbuf), client_ctx_);
  }
  // One request from `from`; the whole response ("" when the connection failed or was closed unanswered).
  std::string Request(const std::string& request, const char* from = "127.0.0.1", double timeout_s = 5) {
    std::unique_ptr<Client> c = Connect(from);
    if (c->fd() < 0 || !c->handshake() || !c->send(request)) return "";
    return c->read_all(timeout_s);
  }
  // Plaintext: trickles the head. TLS: even `i` stall the handshake, odd ones complete it and then trickle
  // the head.
  void TrickleOn(Tricklers* t, std::unique_ptr<Client> c, int i) {
    if (!GetParam()) return t->add(std::move(c), true, kSlowHead);
    if (i % 2 == 0) return t->add(std::move(c), true, kTlsStall);
    ASSERT_TRUE(c->handshake());
    t->add(std::move(c), false, kSlowHead);
  }
  std::string Scrape(const char* from = "127.0.0.1") {
    return Request("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n", from);
  }

  Identity identity_;
  std::unique_ptr<TlsReloader> tls_;
  SSL_CTX* client_ctx_ = nullptr;
  std::unique_ptr<MetricsHttpServer> server_;
  std::mutex mu_;
  std::map<std::string, int> refused_;
};

TEST_P(MetricsHttpServerTest, AnswersOnlyGetMetrics) {
  Start(MetricsHttpLimits());
  std::string r = Scrape();
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_NE(r.find("\r\n\r\n" + kBody), std::string::npos) << r;
  EXPECT_EQ(Request("GET / HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  r = Request("HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  EXPECT_EQ(r.find("test_up"), std::string::npos) << r;
  EXPECT_EQ(Request("GET /admin HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Request("POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(Request("GARBAGE\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(
      Request("GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n").rfind("HTTP/1.1 431", 0),
      0u);
  EXPECT_EQ(server_->served(), 3);
  EXPECT_EQ(server_->refused(), 0);
}

TEST_P(MetricsHttpServerTest, ListensOnIpv6AndFreePorts) {
  MetricsHttpOptions o;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> s = MetricsHttpServer::start(
      "[::1]:0", tls_.get(), [] { return kBody; }, o);
  if (!s.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << s.status();
  EXPECT_GT((*s)->port(), 0);
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> taken = MetricsHttpServer::start(
      "[::1]:" + std::to_string((*s)->port()), tls_.get(), [] { return kBody; }, o);
  EXPECT_FALSE(taken.ok());
  EXPECT_NE(std::string(taken.status().message()).find("server.metrics_listen"), std::string::npos);
  EXPECT_FALSE(MetricsHttpServer::start(
                   "nohost", tls_.get(), [] { return kBody; }, o)
                   .ok());
}

// The scenario: 16 trickling connections (13 from 127.0.0.2, 3 from the scraper's 127.0.0.1) and
// concurrent scrapes, each answered within a second.
TEST_P(MetricsHttpServerTest, TricklingClientsDoNotStarveAScrape) {
  MetricsHttpLimits lim;
  lim.head_deadline_s = 1.5;  // 5 s in frostd
  Start(lim);
  Tricklers t;
  for (int i = 0; i < 16; ++i) {
    std::unique_ptr<Client> c = Connect(i < 13 ? "127.0.0.2" : "127.0.0.1");
    ASSERT_GE(c->fd(), 0);
    TrickleOn(&t, std::move(c), i);
  }
  const Clock::time_point opened = Clock::now();
  // Over the per-address cap (4): each newer connection from 127.0.0.2 displaced the oldest one still
  // reading its head, at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  std::vector<double> closed = t.closed_after();
  for (int i = 0; i < 16; ++i) {
    if (i < 9) {
      EXPECT_GE(closed[i], 0) << "connection " << i << " from 127.0.0.2 over the per-address cap is open";
      EXPECT_LT(closed[i], 0.4 + 0.1 * i) << i;
    } else {
      EXPECT_LT(closed[i], 0) << "connection " << i << " within the caps was cut early";
    }
  }
  EXPECT_EQ(Refused("address_limit"), 9);
  EXPECT_EQ(server_->open_connections(), 7);

  // Scrapes from 127.0.0.1 while 7 connections keep trickling: each answered within a second.
  for (int i = 0; i < 3; ++i) {
    const Clock::time_point t0 = Clock::now();
    const std::string r = Scrape();
    const double took = seconds_since(t0);
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK", 0), 0u) << r;
    EXPECT_NE(r.find("test_up 1"), std::string::npos) << r;
    EXPECT_LT(took, 1.0) << "scrape " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  EXPECT_EQ(t.open(), 7);
  // The head deadline (1.5 s from accept, the TLS handshake included) cuts the 7 that still trickle.
  EXPECT_EQ(t.wait_all_closed(3.0), 0);
  closed = t.closed_after();
  for (int i = 9; i < 16; ++i) {
    EXPECT_GE(closed[i], 1.5 - 0.1) << "connection " << i << " cut before the head deadline";
    EXPECT_LT(closed[i], 1.5 + 0.6) << "connection " << i << " outlived the head deadline";
  }
  EXPECT_LT(seconds_since(opened), 3.5);
  EXPECT_EQ(Refused("head_timeout"), 7);
  EXPECT_EQ(Refused("connection_limit"), 0);
  EXPECT_EQ(server_->served(), 3);
  EXPECT_EQ(server_->open_connections(), 0);
  t.stop();
}

// A scraper sharing its address with clients that hold every slot of that address still gets in: it
// displaces the one of them that has sent nothing for longest.
TEST_P(MetricsHttpServerTest, ScraperSharingAnAddressDisplacesTricklers) {
  Start(MetricsHttpLimits());
  Tricklers t;
  for (int i = 0; i < 4; ++i) {
    std::unique_ptr<Client> c = Connect("127.0.0.1");
    ASSERT_GE(c->fd(), 0);
    TrickleOn(&t, std::move(c), i);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(t.open(), 4);
  const Clock::time_point t0 = Clock::now();
  const std::string r = Scrape();
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_NE(r.find("test_up 1"), std::string::npos) << r;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // One trickler was displaced: the one that had sent nothing for longest (they trickle out of phase, so which
  // one that is depends on timing; HttpFrontTest.PerAddressCapDisplacesTricklers pins the order down).
  EXPECT_EQ(t.open(), 3);
  int displaced = 0;
  for (double when : t.closed_after()) displaced += when >= 0;
  EXPECT_EQ(displaced, 1);
  EXPECT_EQ(Refused("address_limit"), 1);
  t.stop();
}

// The global cap: a connection from a new address displaces the oldest connection (still in its head) of the
// address that holds the most.
TEST_P(MetricsHttpServerTest, GlobalCapDisplacesFromTheBusiestAddress) {
  MetricsHttpLimits lim;
  lim.max_connections = 6;
  Start(lim);
  std::vector<std::unique_ptr<Client>> held;
  for (const char* from : {"127.0.0.3", "127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.2"}) {
    held.push_back(Connect(from));
    ASSERT_GE(held.back()->fd(), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(server_->open_connections(), 6);
  const std::string r = Scrape("127.0.0.4");
  EXPECT_NE(r.find("test_up 1"), std::string::npos) << r;
  EXPECT_EQ(Refused("connection_limit"), 1);
  for (size_t i = 0; i < held.size(); ++i)  // the first of 127.0.0.2 (4 connections) went
    EXPECT_EQ(peer_closed(held[i]->fd()), i == 1) << i;
}

// Connections past their head (answering) are not displaced: over the cap, the new one is closed at once; a
// client that does not read its answer is cut by the write deadline.
TEST_P(MetricsHttpServerTest, WriteDeadlineAndRefusalWhenNothingCanBeDisplaced) {
  MetricsHttpLimits lim;
  lim.max_connections_per_address = 2;
  lim.write_deadline_s = 1.0;
  const std::string big(16 << 20, '#');  // more than the socket buffers hold
  Start(lim, [&big] { return big; });
  std::vector<std::unique_ptr<Client>> stalled;
  for (int i = 0; i < 2; ++i) {
    stalled.push_back(Connect("127.0.0.2", /*rcvbuf=*/4096));
    ASSERT_TRUE(stalled.back()->handshake());
    ASSERT_TRUE(stalled.back()->send("GET /metrics HTTP/1.1\r\n\r\n"));
  }
  for (auto& c : stalled) {  // the answers have begun: both are past their head (and then read no more)
    timeval tv{5, 0};
    setsockopt(c->fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[1];
    ASSERT_EQ(c->read_some(buf, 1), 1);
  }
  EXPECT_EQ(server_->open_connections(), 2);
  const Clock::time_point t0 = Clock::now();
  std::unique_ptr<Client> third = Connect("127.0.0.2");
  ASSERT_GE(third->fd(), 0);
  timeval tv{2, 0};
  setsockopt(third->fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  // Refused at once: plaintext gets a 503 naming the cap before the close; TLS (no handshake) only the close.
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = recv(third->fd(), buf, sizeof(buf), 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  if (GetParam()) {
    EXPECT_EQ(got, "");
  } else {
    EXPECT_EQ(got.rfind("HTTP/1.1 503 ", 0), 0u) << got;
    EXPECT_NE(got.find("max_connections_per_address"), std::string::npos) << got;
  }
  EXPECT_LT(seconds_since(t0), 0.5);
  EXPECT_EQ(Refused("address_limit"), 1);
  // The write deadline (1 s from the end of the head) cuts both.
  for (int i = 0; i < 150 && server_->open_connections() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(server_->open_connections(), 0);
  EXPECT_LT(seconds_since(t0), 2.5);
  EXPECT_EQ(Refused("write_timeout"), 2);
  EXPECT_EQ(server_->served(), 0);
}

// stop() cuts connections that are being served and returns at once.
TEST_P(MetricsHttpServerTest, StopCutsSlowClients) {
  Start(MetricsHttpLimits());
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) held.push_back(Connect("127.0.0.2"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const Clock::time_point t0 = Clock::now();
  server_->stop();
  EXPECT_LT(seconds_since(t0), 1.0);
  for (auto& c : held) EXPECT_TRUE(peer_closed(c->fd()));
}

INSTANTIATE_TEST_SUITE_P(PlainAndTls, MetricsHttpServerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Tls" : "Plain"; });

}  // namespace
}  // namespace frost::server
