// End-to-end tests of frostd: a real frostd process (FROST_FROSTD_PATH) started on free ports with a temp
// YAML config, driven through the generated gRPC C++ stubs, its health service and its /metrics endpoint.
//
// Each fixture owns one frostd. Fixtures whose tests share a config share the process when the binary runs
// them together; ctest runs every TEST in its own process, so there each test starts its own frostd.
// Timeouts are generous (a loaded 2-core CI machine) but bounded; waits poll instead of sleeping.
#include <arpa/inet.h>
#include <fcntl.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "frost/v1/generation.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "integration/proto/reflection_v1alpha.grpc.pb.h"
#include "tests/testing/test_util.h"

extern char** environ;

namespace frost {
namespace {

using Clock = std::chrono::steady_clock;
using grpc::StatusCode;
using HealthStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

constexpr char kReadiness[] = "frost.v1.Generation";
constexpr char kLiveness[] = "";

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Calls `done` every `interval_s` until it returns true or `timeout_s` passes; true when it did.
template <typename F>
bool PollUntil(double timeout_s, F&& done, double interval_s = 0.02) {
  const auto t0 = Clock::now();
  for (;;) {
    if (done()) return true;
    if (SecondsSince(t0) > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ------------------------------------------------------------------------------------------------ /metrics

// GET http://127.0.0.1:port/path over a plain socket (HTTP/1.0: the server closes after the body). The body,
// or nullopt with *error set.
std::optional<std::string> HttpGet(int port, const std::string& path, std::string* error) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    *error = "socket() failed";
    return std::nullopt;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *error = "connect to 127.0.0.1:" + std::to_string(port) + " failed";
  } else {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
      *error = "send failed";
    } else {
      char buf[8192];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) response.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  if (!error->empty()) return std::nullopt;
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || response.find(" 200 ") > response.find("\r\n") ||
      body == std::string::npos) {
    *error = "bad HTTP response: " + response.substr(0, 200);
    return std::nullopt;
  }
  return response.substr(body + 4);
}

// One scrape of /metrics, parsed from the Prometheus text format.
class Scrape {
 public:
  struct Sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
  };

  static Scrape Parse(std::string text) {
    Scrape s;
    s.text_ = std::move(text);
    std::istringstream in(s.text_);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      Sample m;
      size_t i = line.find_first_of("{ ");
      if (i == std::string::npos) continue;
      m.name = line.substr(0, i);
      if (line[i] == '{') {
        ++i;
        while (i < line.size() && line[i] != '}') {
          const size_t eq = line.find('=', i);
          if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') break;
          std::string key = line.substr(i, eq - i), value;
          size_t j = eq + 2;
          for (; j < line.size() && line[j] != '"'; ++j) {
            if (line[j] == '\\' && j + 1 < line.size()) {
              ++j;
              value += line[j] == 'n' ? '\n' : line[j];
            } else {
              value += line[j];
            }
          }
          m.labels[key] = value;
          i = j + 1;
          if (i < line.size() && line[i] == ',') ++i;
        }
        ++i;  // '}'
      }
      m.value = std::strtod(line.c_str() + i, nullptr);
      s.samples_.push_back(std::move(m));
    }
    return s;
  }
  static Scrape Failed(std::string error) {
    Scrape s;
    s.error_ = std::move(error);
    return s;
  }

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& text() const { return text_; }

  // Sum of the samples named `name` whose labels include every pair of `match`; NaN when none matches (so
  // a missing metric never compares equal to anything).
  double Sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    double sum = 0;
    bool found = false;
    for (const Sample& m : samples_) {
      if (m.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : match) {
        auto it = m.labels.find(k);
        all = all && it != m.labels.end() && it->second == v;
      }
      if (!all) continue;
      sum += m.value;
      found = true;
    }
    return found ? sum : std::numeric_limits<double>::quiet_NaN();
  }
  // Sum() for counters whose label sets appear on first use: absent counts as 0.
  double Count(const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    const double v = Sum(name, match);
    return std::isnan(v) ? 0 : v;
  }

  // The engine gauges are at their idle values: nothing running or waiting, no KV cache allocated.
  bool Idle() const {
    return Sum("frost_kv_cache_bytes_in_use") == 0 && Sum("frost_requests_running") == 0 &&
           Sum("frost_requests_waiting") == 0;
  }
  std::string Gauges() const {
    std::ostringstream os;
    os << "running=" << Sum("frost_requests_running") << " waiting=" << Sum("frost_requests_waiting")
       << " kv_bytes=" << Sum("frost_kv_cache_bytes_in_use") << (ok() ? "" : " scrape error: " + error_);
    return os.str();
  }

 private:
  std::string text_, error_;
  std::vector<Sample> samples_;
};

// ------------------------------------------------------------------------------------------------ frostd

struct FrostdOptions {
  std::string model = "builtin:tiny";
  // YAML config (configs/default.yaml documents the keys); listen addresses come from flags.
  std::string yaml;
  double load_delay_s = 0;
};

// Intra-op threads: 1 keeps the machine usable for the client threads (and is fastest for these models).
constexpr char kBaseYaml[] = "model:\n  threads: 1\n";

// One frostd child process.
class Frostd {
 public:
  Frostd() : dir_("frost_e2e") {}
  ~Frostd() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Frostd(const Frostd&) = delete;
  Frostd& operator=(const Frostd&) = delete;

  // Spawns frostd and waits (up to 60 s) for its port file; the model may still be loading.
  ::testing::AssertionResult Spawn(const FrostdOptions& o) {
    const std::string config = dir_.file("frostd.yaml"), ports = dir_.file("ports");
    log_path_ = dir_.file("frostd.log");
    testing::write_text_file(config, o.yaml.empty() ? std::string(kBaseYaml) : o.yaml);
    std::vector<std::string> args = {
        FROST_FROSTD_PATH, "--config",    config, "--listen", "127.0.0.1:0", "--metrics-listen",
        "127.0.0.1:0",     "--port-file", ports,  "--model",  o.model,       "--state-dir",
        dir_.file("state")};
    if (o.load_delay_s > 0) {
      args.push_back("--load-delay-s");
      args.push_back(std::to_string(o.load_delay_s));
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    spawned_at_ = Clock::now();
    const int rc = posix_spawn(&pid_, argv[0], &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      pid_ = -1;
      return ::testing::AssertionFailure() << "posix_spawn(" << argv[0] << "): " << std::strerror(rc);
    }

    const bool got_ports = PollUntil(60, [&] {
      if (!Alive()) return true;
      const std::string s = ReadFileOrEmpty(ports);
      return std::sscanf(s.c_str(), "grpc=%d\nmetrics=%d", &grpc_port_, &metrics_port_) == 2;
    });
    if (!Alive()) return ::testing::AssertionFailure() << "frostd exited at start (" << DescribeExit() << ")";
    if (!got_ports) return ::testing::AssertionFailure() << "no port file from frostd within 60 s";
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
    health_ = grpc::health::v1::Health::NewStub(channel_);
    return ::testing::AssertionSuccess();
  }

  // Polls readiness until SERVING.
  ::testing::AssertionResult WaitReady(double timeout_s = 60) {
    HealthStatus last = grpc::health::v1::HealthCheckResponse::UNKNOWN;
    grpc::Status st;
    const bool ready = PollUntil(
        timeout_s,
        [&] {
          if (!Alive()) return true;
          st = Check(kReadiness, &last);
          return st.ok() && last == grpc::health::v1::HealthCheckResponse::SERVING;
        },
        0.05);
    if (!Alive())
      return ::testing::AssertionFailure() << "frostd exited while loading (" << DescribeExit() << ")";
    if (!ready) {
      return ::testing::AssertionFailure()
             << "readiness not SERVING within " << timeout_s << " s; last: status " << st.error_code()
             << " \"" << st.error_message() << "\", serving status " << last;
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult Start(const FrostdOptions& o) {
    ::testing::AssertionResult r = Spawn(o);
    return r ? WaitReady() : r;
  }

  // grpc.health.v1.Health/Check of `service`.
  grpc::Status Check(const std::string& service, HealthStatus* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status st = health_->Check(&ctx, req, &resp);
    *out = resp.status();
    return st;
  }

  Scrape Metrics() const {
    std::string error;
    std::optional<std::string> body = HttpGet(metrics_port_, "/metrics", &error);
    return body ? Scrape::Parse(std::move(*body)) : Scrape::Failed(error);
  }
  // Scrapes until `pred` holds (up to `timeout_s`); the last scrape.
  Scrape WaitMetrics(const std::function<bool(const Scrape&)>& pred, double timeout_s = 10) const {
    Scrape last = Scrape::Failed("no scrape");
    PollUntil(timeout_s, [&] {
      last = Metrics();
      return last.ok() && pred(last);
    });
    return last;
  }
  Scrape WaitIdle(double timeout_s = 10) const {
    return WaitMetrics([](const Scrape& s) { return s.Idle(); }, timeout_s);
  }

  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return false;
    }
    return r == 0;
  }
  void Terminate() {
    if (pid_ > 0) kill(pid_, SIGTERM);
  }
  // Waits for the process to exit; its wait status, or nullopt after `timeout_s`.
  std::optional<int> WaitExit(double timeout_s) {
    PollUntil(
        timeout_s, [&] { return !Alive(); }, 0.01);
    return pid_ > 0 ? std::nullopt : exit_status_;
  }
  // Sends SIGTERM (the client channel stays open, as a long-lived client's would) and waits for the exit;
  // SIGKILL (and a failure) when it takes over `timeout_s`. *seconds gets the time from SIGTERM to the exit.
  ::testing::AssertionResult StopCleanly(double timeout_s = 60, double* seconds = nullptr) {
    if (pid_ <= 0 && !exit_status_) return ::testing::AssertionFailure() << "frostd was never started";
    const auto t0 = Clock::now();
    Terminate();
    ::testing::AssertionResult r = WaitCleanExit(timeout_s);
    if (seconds != nullptr) *seconds = SecondsSince(t0);
    std::cerr << "[  frostd  ] " << DescribeExit() << " " << SecondsSince(t0) << " s after SIGTERM\n";
    return r;
  }
  // Waits (after a SIGTERM was sent) for the exit and wants status 0; SIGKILL (and a failure) when it takes
  // over `timeout_s`.
  ::testing::AssertionResult WaitCleanExit(double timeout_s) {
    std::optional<int> st = WaitExit(timeout_s);
    if (!st) {
      kill(pid_, SIGKILL);
      WaitExit(10);
      return ::testing::AssertionFailure() << "frostd still running " << timeout_s << " s after SIGTERM";
    }
    if (!WIFEXITED(*st) || WEXITSTATUS(*st) != 0) {
      return ::testing::AssertionFailure() << "frostd " << DescribeExit() << ", want exit status 0";
    }
    return ::testing::AssertionSuccess();
  }
  std::string DescribeExit() const {
    if (!exit_status_) return "still running";
    const int st = *exit_status_;
    if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) return std::string("killed by signal ") + strsignal(WTERMSIG(st));
    return "wait status " + std::to_string(st);
  }

  // VmRSS of the process in bytes (0 when unreadable).
  int64_t RssBytes() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
    }
    return 0;
  }

  void PrintLog() const {
    std::string log = ReadFileOrEmpty(log_path_);
    constexpr size_t kMax = 20000;
    if (log.size() > kMax)
      log = "[... " + std::to_string(log.size() - kMax) + " bytes cut]\n" + log.substr(log.size() - kMax);
    std::cerr << "----- frostd log (" << log_path_ << ", " << DescribeExit() << ") -----\n"
              << log << "----- end of frostd log -----\n";
  }

  // Generation.Tokenize of `text` (add_bos unset), bounded by a 30 s deadline.
  grpc::Status Tokenize(const std::string& text, v1::TokenizeResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::TokenizeRequest req;
    req.set_text(text);
    return stub_->Tokenize(&ctx, req, resp);
  }

  // Closes this client's channel (the stubs become unusable).
  void Disconnect() {
    stub_.reset();
    health_.reset();
    channel_.reset();
  }

  pid_t pid() const { return pid_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  double SecondsSinceSpawn() const { return SecondsSince(spawned_at_); }
  v1::Generation::Stub& stub() { return *stub_; }

 private:
  testing::TempDir dir_;
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  Clock::time_point spawned_at_;
  int grpc_port_ = 0, metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

// ------------------------------------------------------------------------------------------------ client

// Everything a client saw of one Generate stream.
struct StreamOutcome {
  grpc::Status status;
  std::vector<int32_t> ids;  // all chunks' token ids, in order
  std::string text;          // all chunks' text deltas
  int chunks = 0;
  bool has_final = false;
  v1::Final final;
  int after_final = 0;  // messages after the final (the protocol allows none)
  int empty_msgs = 0;   // messages with neither chunk nor final
  double seconds = 0;   // call start to Finish()
};

struct StreamHooks {
  // After the call started, before the first Read.
  std::function<void(grpc::ClientContext&)> on_start;
  // After each chunk: (chunks so far, context), e.g. to cancel.
  std::function<void(int, grpc::ClientContext&)> on_chunk;
};

StreamOutcome RunGenerate(v1::Generation::Stub& stub, const v1::GenerateRequest& req,
                          std::optional<std::chrono::milliseconds> deadline = std::nullopt,
                          const StreamHooks& hooks = {}) {
  StreamOutcome out;
  const auto t0 = Clock::now();
  grpc::ClientContext ctx;
  // Every call is bounded: a hang fails the test instead of stalling it.
  ctx.set_deadline(std::chrono::system_clock::now() + deadline.value_or(std::chrono::milliseconds(180000)));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub.Generate(&ctx, req);
  if (hooks.on_start) hooks.on_start(ctx);
  for (v1::GenerateResponse msg; reader->Read(&msg);) {
    if (out.has_final) ++out.after_final;
    if (msg.has_chunk()) {
      out.ids.insert(out.ids.end(), msg.chunk().token_ids().begin(), msg.chunk().token_ids().end());
      out.text += msg.chunk().text();
      ++out.chunks;
      if (hooks.on_chunk) hooks.on_chunk(out.chunks, ctx);
    } else if (msg.has_final()) {
      out.has_final = true;
      out.final = msg.final();
    } else {
      ++out.empty_msgs;
    }
  }
  out.status = reader->Finish();
  out.seconds = SecondsSince(t0);
  return out;
}

std::string Describe(const StreamOutcome& o) {
  std::ostringstream os;
  os << "status " << o.status.error_code() << " \"" << o.status.error_message() << "\", " << o.ids.size()
     << " ids in " << o.chunks << " chunks, " << o.seconds << " s";
  if (o.has_final) os << ", final {" << o.final.ShortDebugString() << "}";
  return os.str();
}

// A stream that completed: OK, exactly one final (last), FINISH_REASON_LENGTH, counts consistent.
::testing::AssertionResult CompletedWithLength(const StreamOutcome& o, int max_new_tokens) {
  if (!o.status.ok() || !o.has_final || o.after_final != 0 || o.empty_msgs != 0 ||
      o.final.finish_reason() != v1::FINISH_REASON_LENGTH || o.final.completion_tokens() != max_new_tokens ||
      static_cast<int>(o.ids.size()) != max_new_tokens) {
    return ::testing::AssertionFailure()
           << "want OK + final LENGTH with " << max_new_tokens << " tokens; got " << Describe(o);
  }
  return ::testing::AssertionSuccess();
}

// A long generation that ignores EOS: random weights never stop early.
v1::GenerateRequest LongRequest(int max_new_tokens, uint64_t seed = 1,
                                const std::string& prompt = "Once upon") {
  v1::GenerateRequest req;
  req.set_text(prompt);
  req.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  req.mutable_sampling()->set_ignore_eos(true);
  req.mutable_sampling()->set_seed(seed);
  return req;
}

// A call that was refused: `code`, a message holding every one of `parts`, and no stream messages.
::testing::AssertionResult Refused(const StreamOutcome& o, StatusCode code,
                                   const std::vector<std::string>& parts) {
  bool ok = o.status.error_code() == code && o.chunks == 0 && !o.has_final && o.empty_msgs == 0;
  for (const std::string& p : parts) ok = ok && o.status.error_message().find(p) != std::string::npos;
  if (ok) return ::testing::AssertionSuccess();
  std::ostringstream want;
  for (const std::string& p : parts) want << " \"" << p << "\"";
  return ::testing::AssertionFailure() << "want status " << code << " with a message containing" << want.str()
                                       << " and no messages; got " << Describe(o);
}

// ------------------------------------------------------------------------------------------------ fixtures

// Prints the log of every frostd the test used when it failed (always with FROST_E2E_LOGS=1 in the
// environment).
class E2eTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() || std::getenv("FROST_E2E_LOGS") != nullptr) {
      for (const Frostd* f : used_) f->PrintLog();
    }
  }
  // A frostd owned by this test (not shared).
  Frostd* Own(std::unique_ptr<Frostd> f) {
    used_.push_back(f.get());
    owned_.push_back(std::move(f));
    return owned_.back().get();
  }
  Frostd* Use(Frostd* f) {
    used_.push_back(f);
    return f;
  }

 private:
  std::vector<const Frostd*> used_;
  std::vector<std::unique_ptr<Frostd>> owned_;
};

// One frostd per fixture, shared by the fixture's tests, started by the first test that needs it.
struct SharedFrostd {
  std::unique_ptr<Frostd> frostd;
  std::string error;  // why it could not start (then every test of the fixture fails with it)

  Frostd* Get(const FrostdOptions& o) {
    if (!frostd && error.empty()) {
      frostd = std::make_unique<Frostd>();
      ::testing::AssertionResult r = frostd->Start(o);
      if (!r) {
        error = r.message();
        frostd->PrintLog();
      }
    }
    return error.empty() ? frostd.get() : nullptr;
  }
  // SIGTERM with nothing in flight: frostd must exit 0.
  void Stop() {
    if (!frostd) return;
    if (error.empty()) {
      ::testing::AssertionResult r = frostd->StopCleanly();
      if (!r) {
        ADD_FAILURE() << "shared frostd: " << r.message();
        frostd->PrintLog();
      }
    }
    frostd.reset();
    error.clear();
  }
};

#define FROST_USE_SHARED(var, shared, options)                           \
  Frostd* var = (shared).Get(options);                                   \
  ASSERT_NE(var, nullptr) << "frostd did not start: " << (shared).error; \
  Use(var)

// ================================================================================================ 1. golden

// stories260K, temperature 0: every case of reference.json streamed through gRPC, token for token.
class GrpcE2eStories : public E2eTest {
 protected:
  static void TearDownTestSuite() { shared_.Stop(); }
  static FrostdOptions Options(const std::string& dir) {
    FrostdOptions o;
    o.model = dir;
    o.yaml = kBaseYaml;
    return o;
  }
  static SharedFrostd shared_;
};
SharedFrostd GrpcE2eStories::shared_;

TEST_F(GrpcE2eStories, GreedyStreamMatchesReference) {
  FROST_REQUIRE_SHARED(ref_path, "models/stories260K/reference.json");
  FROST_USE_SHARED(f, shared_, Options(testing::shared_path("models/stories260K")));
  const nlohmann::json ref = nlohmann::json::parse(testing::read_text_file(ref_path));
  ASSERT_EQ(ref["cases"].size(), 3u);
  for (const nlohmann::json& c : ref["cases"]) {
    const std::string prompt = c["prompt"].get<std::string>();
    SCOPED_TRACE("prompt: " + prompt);
    const auto input_ids = c["input_ids"].get<std::vector<int32_t>>();
    const auto want_ids = c["greedy_new_ids"].get<std::vector<int32_t>>();
    // The reference decodes greedily with no stop token; its ids hold no EOS, so the engine's EOS stop
    // cannot trigger and ignore_eos is left at its default.
    ASSERT_EQ(std::count(want_ids.begin(), want_ids.end(), 2), 0);

    v1::GenerateRequest req;
    req.set_text(prompt);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_new_tokens(static_cast<int32_t>(want_ids.size()));
    const StreamOutcome o = RunGenerate(f->stub(), req);
    ASSERT_TRUE(o.status.ok()) << Describe(o);
    EXPECT_EQ(o.ids, want_ids);
    // greedy_new_text is DecodeIds(new ids), which drops the leading space of the first piece; the stream
    // continues the prompt and keeps it. prompt_plus_greedy_text pins the exact streamed text.
    EXPECT_EQ(prompt + o.text, c["prompt_plus_greedy_text"].get<std::string>());
    const std::string want_text = c["greedy_new_text"].get<std::string>();
    EXPECT_TRUE(o.text == want_text || o.text == " " + want_text) << "streamed \"" << o.text << "\"";
    ASSERT_TRUE(o.has_final) << Describe(o);
    EXPECT_EQ(o.after_final, 0);
    EXPECT_EQ(o.final.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(o.final.prompt_tokens(), static_cast<int32_t>(input_ids.size()));
    EXPECT_EQ(o.final.completion_tokens(), static_cast<int32_t>(want_ids.size()));
    EXPECT_TRUE(o.final.stop_reason().empty()) << o.final.stop_reason();

    // The same prompt given as token ids (no BOS added) gives the same tokens.
    v1::GenerateRequest by_ids = req;
    by_ids.mutable_token_ids()->mutable_ids()->Assign(input_ids.begin(), input_ids.end());
    const StreamOutcome o2 = RunGenerate(f->stub(), by_ids);
    ASSERT_TRUE(o2.status.ok()) << Describe(o2);
    EXPECT_EQ(o2.ids, want_ids);
    EXPECT_EQ(o2.final.prompt_tokens(), static_cast<int32_t>(input_ids.size()));
  }
}

// Every KV codec over gRPC (per-request kv.codec): the stream completes, and the codecs that keep
// enough precision give the reference's greedy tokens. int4 (7 levels per token and head) is only
// required to agree on a prefix: it is the codec the repair operators exist for.
TEST_F(GrpcE2eStories, GenerateWithEveryKvCodec) {
  FROST_REQUIRE_SHARED(ref_path, "models/stories260K/reference.json");
  FROST_USE_SHARED(f, shared_, Options(testing::shared_path("models/stories260K")));
  const nlohmann::json ref = nlohmann::json::parse(testing::read_text_file(ref_path));
  const nlohmann::json& c = ref["cases"][0];
  const auto want_ids = c["greedy_new_ids"].get<std::vector<int32_t>>();
  for (const char* codec : {"fp32", "fp16", "bf16", "int8", "int4"}) {
    SCOPED_TRACE(codec);
    v1::GenerateRequest req;
    req.set_text(c["prompt"].get<std::string>());
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_new_tokens(static_cast<int32_t>(want_ids.size()));
    req.mutable_kv()->set_codec(codec);
    const StreamOutcome o = RunGenerate(f->stub(), req);
    ASSERT_TRUE(o.status.ok()) << Describe(o);
    ASSERT_TRUE(o.has_final) << Describe(o);
    EXPECT_EQ(o.final.completion_tokens(), static_cast<int32_t>(want_ids.size()));
    if (std::string(codec) == "int4") {
      ASSERT_GE(o.ids.size(), 4u);
      EXPECT_TRUE(std::equal(o.ids.begin(), o.ids.begin() + 4, want_ids.begin()));
    } else {
      EXPECT_EQ(o.ids, want_ids);
    }
    EXPECT_EQ(o.final.kv_codec(), codec);
    EXPECT_EQ(o.final.kv_splice(), "");
  }
  // kvsplice needs an active KVSplice (a kvsplice artifact or engine.kv_splice): refused before any model
  // work.
  v1::GenerateRequest req;
  req.set_text(c["prompt"].get<std::string>());
  req.mutable_kv()->set_codec("kvsplice");
  const StreamOutcome o = RunGenerate(f->stub(), req);
  EXPECT_EQ(o.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << Describe(o);
  EXPECT_NE(o.status.error_message().find("kv.codec: kvsplice but no KVSplice is active"), std::string::npos)
      << Describe(o);
  EXPECT_EQ(o.chunks, 0);
}

TEST_F(GrpcE2eStories, TokenizeAndModelInfo) {
  FROST_REQUIRE_SHARED(ref_path, "models/stories260K/reference.json");
  FROST_USE_SHARED(f, shared_, Options(testing::shared_path("models/stories260K")));
  const nlohmann::json ref = nlohmann::json::parse(testing::read_text_file(ref_path));
  ASSERT_FALSE(ref["cases"].empty());
  for (const nlohmann::json& c : ref["cases"]) {
    v1::TokenizeResponse resp;
    const grpc::Status st = f->Tokenize(c["prompt"].get<std::string>(), &resp);
    ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
    EXPECT_EQ(std::vector<int32_t>(resp.token_ids().begin(), resp.token_ids().end()),
              c["input_ids"].get<std::vector<int32_t>>())
        << c["prompt"];
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ModelInfo info;
  const grpc::Status st = f->stub().GetModelInfo(&ctx, v1::ModelInfoRequest(), &info);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(info.name(), "stories260K");
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.vocab_size(), 512);
  EXPECT_EQ(info.context_length(), 512);
  EXPECT_GT(info.n_params(), 200000);
  EXPECT_LT(info.n_params(), 400000);
  EXPECT_EQ(info.weight_dtype(), "fp32");
  EXPECT_EQ(info.kv_codec(), "fp32");
  // The KV block pool and the scheduling limits (the defaults of configs/default.yaml).
  EXPECT_GT(info.kv_blocks(), 0);
  EXPECT_EQ(info.kv_block_tokens(), 16);
  EXPECT_EQ(info.kv_cache_bytes(), info.kv_blocks() * info.kv_block_bytes());
  EXPECT_EQ(info.max_running(), 32);
  EXPECT_EQ(info.max_batch_tokens(), 128);
  EXPECT_TRUE(info.prefix_caching());
}

// ================================================================================================ 2. cancel

// builtin:15m decodes a few hundred tokens per second on one CPU thread: 1000 tokens keep a stream running
// for seconds.
constexpr int kLongTokens = 1000;

class GrpcE2eLong : public E2eTest {
 protected:
  static void TearDownTestSuite() { shared_.Stop(); }
  static FrostdOptions Options() {
    FrostdOptions o;
    o.model = "builtin:15m";
    o.yaml = kBaseYaml;
    return o;
  }
  static SharedFrostd shared_;
};
SharedFrostd GrpcE2eLong::shared_;

TEST_F(GrpcE2eLong, ClientCancelEndsStreamAndFreesKv) {
  FROST_USE_SHARED(f, shared_, Options());
  const Scrape before = f->WaitIdle();
  ASSERT_TRUE(before.Idle()) << before.Gauges();
  Clock::time_point t_cancel;
  StreamHooks hooks;
  hooks.on_chunk = [&](int n, grpc::ClientContext& ctx) {
    if (n == 3) {
      t_cancel = Clock::now();
      ctx.TryCancel();
    }
  };
  const StreamOutcome o = RunGenerate(f->stub(), LongRequest(kLongTokens), std::nullopt, hooks);
  ASSERT_GE(o.chunks, 3) << Describe(o);
  const double cancel_to_end = SecondsSince(t_cancel);
  EXPECT_EQ(o.status.error_code(), StatusCode::CANCELLED) << Describe(o);
  EXPECT_FALSE(o.has_final) << Describe(o);
  EXPECT_LT(static_cast<int>(o.ids.size()), kLongTokens);
  EXPECT_LT(cancel_to_end, 2.0) << "Finish() came " << cancel_to_end << " s after TryCancel()";

  // The server saw the cancel and stopped generating: the generation ended "cancelled" well short of
  // max_new_tokens, the KV cache is released and nothing runs.
  const std::map<std::string, std::string> cancelled = {{"finish_reason", "cancelled"}};
  const std::map<std::string, std::string> cancelled_rpc = {{"rpc", "Generate"}, {"code", "CANCELLED"}};
  const Scrape after = f->WaitMetrics([&](const Scrape& s) {
    return s.Count("frost_generations_total", cancelled) -
                   before.Count("frost_generations_total", cancelled) ==
               1 &&
           s.Count("frost_requests_total", cancelled_rpc) -
                   before.Count("frost_requests_total", cancelled_rpc) ==
               1 &&
           s.Idle();
  });
  EXPECT_TRUE(after.Idle()) << after.Gauges();
  EXPECT_EQ(
      after.Count("frost_generations_total", cancelled) - before.Count("frost_generations_total", cancelled),
      1);
  EXPECT_EQ(after.Count("frost_requests_total", cancelled_rpc) -
                before.Count("frost_requests_total", cancelled_rpc),
            1);
  const double generated =
      after.Sum("frost_generation_tokens_total") - before.Sum("frost_generation_tokens_total");
  EXPECT_GE(generated, static_cast<double>(o.ids.size()));
  EXPECT_LT(generated, kLongTokens) << "the engine kept generating after the cancel";
}

TEST_F(GrpcE2eLong, DeadlineEndsStreamAndFreesKv) {
  FROST_USE_SHARED(f, shared_, Options());
  const Scrape before = f->WaitIdle();
  ASSERT_TRUE(before.Idle()) << before.Gauges();
  constexpr double kDeadline = 0.3;
  const StreamOutcome o = RunGenerate(f->stub(), LongRequest(kLongTokens), std::chrono::milliseconds(300));
  EXPECT_EQ(o.status.error_code(), StatusCode::DEADLINE_EXCEEDED) << Describe(o);
  EXPECT_FALSE(o.has_final) << Describe(o);
  EXPECT_LT(static_cast<int>(o.ids.size()), kLongTokens);
  EXPECT_LT(o.seconds, kDeadline + 1.5) << Describe(o);
  EXPECT_GE(o.seconds, kDeadline - 0.05) << Describe(o);

  // Whether the engine saw its own copy of the deadline first ("deadline") or gRPC's cancellation
  // ("cancelled") is a race; either way exactly one generation ended early and everything is released.
  auto early = [](const Scrape& s) {
    return s.Count("frost_generations_total", {{"finish_reason", "deadline"}}) +
           s.Count("frost_generations_total", {{"finish_reason", "cancelled"}});
  };
  const Scrape after =
      f->WaitMetrics([&](const Scrape& s) { return early(s) - early(before) == 1 && s.Idle(); });
  EXPECT_EQ(early(after) - early(before), 1);
  EXPECT_TRUE(after.Idle()) << after.Gauges();
  const double generated =
      after.Sum("frost_generation_tokens_total") - before.Sum("frost_generation_tokens_total");
  EXPECT_GE(generated, static_cast<double>(o.ids.size()));
  EXPECT_LT(generated, kLongTokens) << "the engine kept generating after the deadline";
}

// ================================================================================================ 3.
// overload

class GrpcE2eOverload : public E2eTest {};

TEST_F(GrpcE2eOverload, RejectsExactlyTheRequestsBeyondRunningPlusWaiting) {
  constexpr int kRunning = 2, kWaiting = 3, kExtra = 4, kCalls = kRunning + kWaiting + kExtra;
  // 320 tokens of builtin:15m: the first streams run for about a second, far longer than it takes the
  // nine calls to arrive, and the whole test stays at a few seconds.
  constexpr int kTokens = 320;
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions opts;
  opts.model = "builtin:15m";
  opts.yaml = std::string(kBaseYaml) + "engine:\n  max_running: " + std::to_string(kRunning) +
              "\n  max_waiting: " + std::to_string(kWaiting) + "\n";
  ASSERT_TRUE(f->Start(opts));

  std::vector<StreamOutcome> out(kCalls);
  std::vector<double> ended_at(kCalls);
  std::mutex mu;
  std::condition_variable cv;
  bool go = false;
  Clock::time_point t_go;
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
      }
      out[i] = RunGenerate(f->stub(), LongRequest(kTokens, static_cast<uint64_t>(i + 1)));
      ended_at[i] = SecondsSince(t_go);
    });
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    t_go = Clock::now();
    go = true;
  }
  cv.notify_all();
  // While the accepted calls run, the engine holds exactly max_running + max_waiting of them.
  const Scrape full = f->WaitMetrics([&](const Scrape& s) {
    return s.Sum("frost_requests_running") == kRunning && s.Sum("frost_requests_waiting") == kWaiting;
  });
  EXPECT_EQ(full.Sum("frost_requests_running"), kRunning) << full.Gauges();
  EXPECT_EQ(full.Sum("frost_requests_waiting"), kWaiting) << full.Gauges();
  for (std::thread& t : threads) t.join();

  int rejected = 0, completed = 0;
  double first_ok_end = 1e9, last_reject_end = 0;
  for (int i = 0; i < kCalls; ++i) {
    if (out[i].status.error_code() == StatusCode::RESOURCE_EXHAUSTED) {
      ++rejected;
      EXPECT_TRUE(Refused(out[i], StatusCode::RESOURCE_EXHAUSTED, {"server busy", "limits 2 + 3"}));
      last_reject_end = std::max(last_reject_end, ended_at[i]);
    } else {
      EXPECT_TRUE(CompletedWithLength(out[i], kTokens)) << "call " << i;
      ++completed;
      first_ok_end = std::min(first_ok_end, ended_at[i]);
    }
  }
  // No race margin is needed: every call arrives within milliseconds, the first accepted one needs ~1 s.
  EXPECT_EQ(rejected, kExtra);
  EXPECT_EQ(completed, kRunning + kWaiting);
  // Rejections are immediate: all of them arrived before the first accepted stream finished.
  EXPECT_LT(last_reject_end, first_ok_end);
  EXPECT_LT(last_reject_end, 5.0);

  const Scrape after = f->WaitMetrics([&](const Scrape& s) {
    return s.Sum("frost_requests_total", {{"rpc", "Generate"}}) == kCalls && s.Idle();
  });
  EXPECT_EQ(after.Sum("frost_requests_rejected_total", {{"reason", "queue_full"}}), rejected);
  EXPECT_EQ(after.Sum("frost_requests_total", {{"rpc", "Generate"}, {"code", "RESOURCE_EXHAUSTED"}}),
            rejected);
  EXPECT_EQ(after.Sum("frost_requests_total", {{"rpc", "Generate"}, {"code", "OK"}}), completed);
  EXPECT_EQ(after.Sum("frost_generations_total", {{"finish_reason", "length"}}), completed);
  EXPECT_TRUE(after.Idle()) << after.Gauges();
  EXPECT_TRUE(f->StopCleanly());
}

// ================================================================================================ 4. health,
// drain

class GrpcE2eHealth : public E2eTest {};

TEST_F(GrpcE2eHealth, LivenessBeforeReadinessWhileTheModelLoads) {
  // The port file is written once both ports are bound, before the load delay: from then on liveness is
  // SERVING and readiness NOT_SERVING until the model has loaded and warmed up.
  constexpr double kLoadDelay = 3;
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions opts;
  opts.load_delay_s = kLoadDelay;
  ASSERT_TRUE(f->Spawn(opts));

  HealthStatus live{}, ready{};
  grpc::Status st = f->Check(kLiveness, &live);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(live, grpc::health::v1::HealthCheckResponse::SERVING);
  st = f->Check(kReadiness, &ready);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(ready, grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  v1::GenerateRequest req = LongRequest(4);
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), req), StatusCode::UNAVAILABLE, {"loading"}));
  {
    v1::TokenizeResponse tresp;
    const grpc::Status ts = f->Tokenize("hi", &tresp);
    EXPECT_EQ(ts.error_code(), StatusCode::UNAVAILABLE) << ts.error_message();
  }
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    const grpc::Status ms = f->stub().GetModelInfo(&ctx, v1::ModelInfoRequest(), &info);
    EXPECT_EQ(ms.error_code(), StatusCode::UNAVAILABLE) << ms.error_message();
  }
  const double checked_at = f->SecondsSinceSpawn();
  EXPECT_LT(checked_at, kLoadDelay) << "the checks above ran after the load delay: their results are void";
  const Scrape loading = f->Metrics();
  EXPECT_EQ(loading.Sum("frost_ready"), 0);
  EXPECT_EQ(loading.Sum("frost_requests_rejected_total", {{"reason", "unavailable"}}), 1);

  ASSERT_TRUE(f->WaitReady());
  EXPECT_GE(f->SecondsSinceSpawn(), kLoadDelay);
  st = f->Check(kLiveness, &live);
  EXPECT_TRUE(st.ok() && live == grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), req), 4));
  EXPECT_EQ(f->Metrics().Sum("frost_ready"), 1);
  EXPECT_TRUE(f->StopCleanly());
}

TEST_F(GrpcE2eHealth, DrainLetsTheInFlightStreamFinish) {
  // 800 tokens of builtin:15m take a couple of seconds; the drain allows far more.
  constexpr int kTokens = 800;
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions opts;
  opts.model = "builtin:15m";
  opts.yaml = std::string(kBaseYaml) + "server:\n  drain_timeout_s: 30\n";
  ASSERT_TRUE(f->Start(opts));

  std::promise<void> first_chunk;
  std::atomic<bool> stream_done{false};
  StreamOutcome o;
  std::thread reader([&] {
    StreamHooks hooks;
    hooks.on_chunk = [&](int n, grpc::ClientContext&) {
      if (n == 1) first_chunk.set_value();
    };
    o = RunGenerate(f->stub(), LongRequest(kTokens), std::nullopt, hooks);
    stream_done = true;
  });
  struct JoinOnExit {
    std::thread& t;
    ~JoinOnExit() {
      if (t.joinable()) t.join();
    }
  } join_on_exit{reader};
  ASSERT_EQ(first_chunk.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);

  const auto t_term = Clock::now();
  f->Terminate();
  HealthStatus ready{};
  grpc::Status st;
  const bool not_serving = PollUntil(10, [&] {
    st = f->Check(kReadiness, &ready);
    return st.ok() && ready == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  });
  EXPECT_TRUE(not_serving) << "readiness after SIGTERM: status " << st.error_code() << " \""
                           << st.error_message() << "\", serving status " << ready;
  HealthStatus live{};
  st = f->Check(kLiveness, &live);
  EXPECT_TRUE(st.ok() && live == grpc::health::v1::HealthCheckResponse::SERVING)
      << "liveness during the drain: " << st.error_code() << " " << live;
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), LongRequest(4)), StatusCode::UNAVAILABLE, {"draining"}));
  {
    v1::TokenizeResponse tresp;
    const grpc::Status ts = f->Tokenize("hi", &tresp);
    EXPECT_EQ(ts.error_code(), StatusCode::UNAVAILABLE) << ts.error_message();
  }
  const Scrape draining = f->Metrics();
  EXPECT_EQ(draining.Sum("frost_ready"), 0) << draining.error();
  EXPECT_EQ(draining.Sum("frost_requests_running"), 1) << draining.Gauges();
  // All of the above was observed while the in-flight stream was still running.
  EXPECT_FALSE(stream_done.load()) << "the stream ended before the drain checks: they did not test a drain";

  reader.join();
  EXPECT_TRUE(CompletedWithLength(o, kTokens));
  const double stream_end = SecondsSince(t_term);
  f->Disconnect();
  ASSERT_TRUE(f->WaitCleanExit(60));
  std::cerr << "drain: stream ended " << stream_end << " s and frostd exited " << SecondsSince(t_term)
            << " s after SIGTERM; stream " << Describe(o) << "\n";
}

TEST_F(GrpcE2eHealth, DrainDeadlineCancelsTheStreamWithAFinal) {
  // A 1 s drain deadline against a 1000-token builtin:15m stream (a few seconds): the server cancels it at
  // the deadline and, as a drain (not the client) cancelled it, sends the final message
  // FINISH_REASON_CANCELLED with status OK (server/generation_service.cc, on_finish).
  constexpr double kDrain = 1;
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions opts;
  opts.model = "builtin:15m";
  opts.yaml = std::string(kBaseYaml) + "server:\n  drain_timeout_s: 1\n";
  ASSERT_TRUE(f->Start(opts));

  std::promise<void> first_chunk;
  StreamOutcome o;
  Clock::time_point t_term, t_end;
  std::thread reader([&] {
    StreamHooks hooks;
    hooks.on_chunk = [&](int n, grpc::ClientContext&) {
      if (n == 1) first_chunk.set_value();
    };
    o = RunGenerate(f->stub(), LongRequest(kLongTokens), std::nullopt, hooks);
    t_end = Clock::now();
  });
  const bool started =
      first_chunk.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  t_term = Clock::now();
  f->Terminate();
  reader.join();
  ASSERT_TRUE(started);
  const double term_to_end = std::chrono::duration<double>(t_end - t_term).count();

  EXPECT_TRUE(o.status.ok()) << Describe(o);
  ASSERT_TRUE(o.has_final) << Describe(o);
  EXPECT_EQ(o.after_final, 0);
  EXPECT_EQ(o.final.finish_reason(), v1::FINISH_REASON_CANCELLED)
      << Describe(o)
      << (o.final.finish_reason() == v1::FINISH_REASON_LENGTH
              ? " (the stream finished before the drain deadline: this machine is too fast)"
              : "");
  EXPECT_EQ(o.final.completion_tokens(), static_cast<int32_t>(o.ids.size()));
  EXPECT_LT(static_cast<int>(o.ids.size()), kLongTokens);
  EXPECT_GE(term_to_end, kDrain * 0.9) << "the stream was cut before the drain deadline";
  EXPECT_LT(term_to_end, kDrain + 5.0);

  f->Disconnect();
  ASSERT_TRUE(f->WaitCleanExit(60));
  std::cerr << "drain deadline: stream ended " << term_to_end << " s and frostd exited "
            << SecondsSince(t_term) << " s after SIGTERM; stream " << Describe(o) << "\n";
}

TEST_F(GrpcE2eHealth, IdleServerExitsPromptlyWithClientsConnected) {
  // Kubernetes sends SIGTERM and waits terminationGracePeriodSeconds: an idle frostd must not sit out gRPC's
  // shutdown grace because a client keeps its (idle) channel open, nor civetweb's poll interval. Before
  // server/frost_server.cc and server/metrics.cc handled both, this took ~6 s.
  Frostd* f = Own(std::make_unique<Frostd>());
  ASSERT_TRUE(f->Start(FrostdOptions()));
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), LongRequest(3)), 3));
  ASSERT_TRUE(f->Metrics().ok());
  double seconds = 0;
  EXPECT_TRUE(f->StopCleanly(60, &seconds));
  EXPECT_LT(seconds, 3.0) << "an idle frostd took " << seconds << " s to exit after SIGTERM";
}

// ================================================================================================ 5.
// validation

class GrpcE2eValidation : public E2eTest {
 protected:
  static void TearDownTestSuite() { shared_.Stop(); }
  static FrostdOptions Options() {
    FrostdOptions o;
    o.model = "builtin:tiny";  // byte tokenizer: a text prompt is 1 (BOS) + its bytes tokens
    o.yaml = std::string(kBaseYaml) +
             "engine:\n"
             "  max_context: 64\n"
             "limits:\n"
             "  max_prompt_bytes: 48\n"
             "  max_prompt_tokens: 24\n"
             "  max_new_tokens: 100\n"
             "  max_stop_strings: 2\n"
             "  max_stop_bytes: 8\n"
             "  max_logprobs: 2\n";
    return o;
  }
  static SharedFrostd shared_;
};
SharedFrostd GrpcE2eValidation::shared_;

struct BadRequest {
  std::string name;
  std::function<void(v1::GenerateRequest&)> mutate;
  std::vector<std::string> message_parts;  // the field (as the server names it) and the value
};

TEST_F(GrpcE2eValidation, EachBadRequestIsInvalidArgumentBeforeAnyModelWork) {
  FROST_USE_SHARED(f, shared_, Options());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto sp = [](v1::GenerateRequest& r) { return r.mutable_sampling(); };
  // Field names: the edge checks use proto paths ("sampling.logprobs", "kv.codec"), the engine's checks the
  // bare field ("temperature", "prompt_ids[1]"); the parts below match either spelling.
  const std::vector<BadRequest> cases = {
      {"no prompt", [](v1::GenerateRequest& r) { r.clear_prompt(); }, {"prompt", "text or token_ids"}},
      {"empty text", [](v1::GenerateRequest& r) { r.set_text(""); }, {"text", "must not be empty"}},
      {"text over max_prompt_bytes",
       [](v1::GenerateRequest& r) { r.set_text(std::string(49, 'a')); },
       {"text", "49 bytes", "max_prompt_bytes = 48"}},
      {"prompt over max_prompt_tokens",
       [](v1::GenerateRequest& r) { r.set_text(std::string(30, 'a')); },
       {"31 tokens", "max_prompt_tokens = 24"}},
      {"max_new_tokens 0",
       [&](v1::GenerateRequest& r) { sp(r)->set_max_new_tokens(0); },
       {"max_new_tokens", "got 0"}},
      {"max_new_tokens -1",
       [&](v1::GenerateRequest& r) { sp(r)->set_max_new_tokens(-1); },
       {"max_new_tokens", "got -1"}},
      {"max_new_tokens over the limit",
       [&](v1::GenerateRequest& r) { sp(r)->set_max_new_tokens(101); },
       {"max_new_tokens", "[1, 100]", "got 101"}},
      {"prompt + max_new_tokens over the context",
       [&](v1::GenerateRequest& r) {
         r.set_text(std::string(20, 'a'));  // 21 tokens
         sp(r)->set_max_new_tokens(50);
       },
       {"prompt tokens (21)", "max_new_tokens (50)", "71", "context length 64"}},
      {"temperature -1",
       [&](v1::GenerateRequest& r) { sp(r)->set_temperature(-1); },
       {"temperature", "got -1"}},
      {"temperature NaN",
       [&](v1::GenerateRequest& r) { sp(r)->set_temperature(nan); },
       {"temperature", "nan"}},
      {"top_p 0", [&](v1::GenerateRequest& r) { sp(r)->set_top_p(0); }, {"top_p", "(0, 1]", "got 0"}},
      {"top_p 1.5", [&](v1::GenerateRequest& r) { sp(r)->set_top_p(1.5f); }, {"top_p", "got 1.5"}},
      {"top_p NaN", [&](v1::GenerateRequest& r) { sp(r)->set_top_p(nan); }, {"top_p", "nan"}},
      {"top_k -1", [&](v1::GenerateRequest& r) { sp(r)->set_top_k(-1); }, {"top_k", "got -1"}},
      {"min_p 1.5", [&](v1::GenerateRequest& r) { sp(r)->set_min_p(1.5f); }, {"min_p", "got 1.5"}},
      {"repetition_penalty 0",
       [&](v1::GenerateRequest& r) { sp(r)->set_repetition_penalty(0); },
       {"repetition_penalty", "got 0"}},
      {"presence_penalty 3",
       [&](v1::GenerateRequest& r) { sp(r)->set_presence_penalty(3); },
       {"presence_penalty", "got 3"}},
      {"too many stop strings",
       [&](v1::GenerateRequest& r) {
         for (const char* s : {"a", "b", "c"}) sp(r)->add_stop(s);
       },
       {"stop", "at most 2", "got 3"}},
      {"too long stop string",
       [&](v1::GenerateRequest& r) { sp(r)->add_stop("123456789"); },
       {"stop[0]", "8 bytes", "got 9"}},
      {"empty stop string",
       [&](v1::GenerateRequest& r) { sp(r)->add_stop(""); },
       {"stop[0]", "must not be empty"}},
      {"stop token id out of vocab",
       [&](v1::GenerateRequest& r) { sp(r)->add_stop_token_ids(600); },
       {"stop_token_ids[0]", "512", "got 600"}},
      {"logprobs over max_logprobs",
       [&](v1::GenerateRequest& r) { sp(r)->set_logprobs(3); },
       {"logprobs", "[0, 2]", "got 3"}},
      {"logprobs -1", [&](v1::GenerateRequest& r) { sp(r)->set_logprobs(-1); }, {"logprobs", "got -1"}},
      {"unknown kv codec",
       [](v1::GenerateRequest& r) { r.mutable_kv()->set_codec("fp8"); },
       {"kv.codec", "\"fp8\""}},
      {"token id out of vocab",
       [](v1::GenerateRequest& r) {
         for (int32_t id : {1, 512, 70}) r.mutable_token_ids()->add_ids(id);
       },
       {"ids[1]", "512", "out of range [0, 512)"}},
      {"empty token ids",
       [](v1::GenerateRequest& r) { r.mutable_token_ids(); },
       {"token_ids.ids", "must not be empty"}},
      {"request_id over 128 bytes",
       [](v1::GenerateRequest& r) { r.set_request_id(std::string(129, 'r')); },
       {"request_id", "129 bytes"}},
  };

  const Scrape before = f->WaitIdle();
  ASSERT_TRUE(before.ok()) << before.error();
  for (const BadRequest& c : cases) {
    v1::GenerateRequest req;
    req.set_text("Hello");
    req.mutable_sampling()->set_max_new_tokens(8);
    c.mutate(req);
    EXPECT_TRUE(Refused(RunGenerate(f->stub(), req), StatusCode::INVALID_ARGUMENT, c.message_parts))
        << c.name;
  }
  const double n = static_cast<double>(cases.size());
  auto delta = [&](const Scrape& s, const std::string& name,
                   const std::map<std::string, std::string>& m = {}) {
    return s.Count(name, m) - before.Count(name, m);
  };
  const Scrape after = f->WaitMetrics([&](const Scrape& s) {
    return delta(s, "frost_requests_total", {{"rpc", "Generate"}, {"code", "INVALID_ARGUMENT"}}) >= n;
  });
  EXPECT_EQ(delta(after, "frost_requests_rejected_total", {{"reason", "invalid_argument"}}), n);
  EXPECT_EQ(delta(after, "frost_requests_total", {{"rpc", "Generate"}, {"code", "INVALID_ARGUMENT"}}), n);
  // No model work: no prompt tokens, no generated tokens, no generation of any kind, no first token.
  EXPECT_EQ(delta(after, "frost_prompt_tokens_total"), 0);
  EXPECT_EQ(delta(after, "frost_generation_tokens_total"), 0);
  EXPECT_EQ(delta(after, "frost_time_to_first_token_seconds_count"), 0);
  EXPECT_EQ(after.Count("frost_generations_total"), before.Count("frost_generations_total"));

  // Control: requests exactly at every limit are accepted (the limits are not off by one).
  v1::GenerateRequest edge;
  edge.set_text(std::string(23, 'a'));              // 24 tokens = max_prompt_tokens
  edge.mutable_sampling()->set_max_new_tokens(40);  // 24 + 40 = 64 = max_context
  edge.mutable_sampling()->set_ignore_eos(true);
  edge.mutable_sampling()->set_logprobs(2);
  edge.mutable_sampling()->add_stop("\x01\x02\x03\x04\x05\x06\x07\x08");  // 8 bytes, never generated
  edge.mutable_sampling()->add_stop("\x01");
  const StreamOutcome ok = RunGenerate(f->stub(), edge);
  EXPECT_TRUE(CompletedWithLength(ok, 40));
  EXPECT_EQ(ok.final.prompt_tokens(), 24);
}

TEST_F(GrpcE2eValidation, TokenizeChecksItsText) {
  FROST_USE_SHARED(f, shared_, Options());
  v1::TokenizeResponse resp;
  grpc::Status st = f->Tokenize("", &resp);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("text: must not be empty"), std::string::npos) << st.error_message();
  st = f->Tokenize(std::string(49, 'a'), &resp);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("max_prompt_bytes = 48"), std::string::npos) << st.error_message();
  st = f->Tokenize("ab", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(std::vector<int32_t>(resp.token_ids().begin(), resp.token_ids().end()),
            (std::vector<int32_t>{1, 3 + 'a', 3 + 'b'}));
}

// Invalid UTF-8 in a proto3 `string` field: protobuf's parser refuses such a message, so with typed callback
// methods gRPC would answer UNIMPLEMENTED with an empty message before frostd saw it. Generate and Tokenize
// parse the request bytes themselves (server/proto_codec.h), so the client gets INVALID_ARGUMENT naming the
// field, counted like every other invalid request, and nothing is generated. (The C++ client serializes such
// strings after logging a protobuf ERROR; clients in other languages can send them too.)
TEST_F(GrpcE2eValidation, InvalidUtf8IsInvalidArgumentNamingTheField) {
  FROST_USE_SHARED(f, shared_, Options());
  const Scrape before = f->WaitIdle();
  ASSERT_TRUE(before.ok()) << before.error();
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), LongRequest(4, 1, "ab\xff\xfe")), StatusCode::INVALID_ARGUMENT,
                      {"text: not valid UTF-8", "offset 2 of 4"}));

  v1::GenerateRequest stop = LongRequest(4);
  stop.mutable_sampling()->add_stop("fine");
  stop.mutable_sampling()->add_stop("\xc3");
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), stop), StatusCode::INVALID_ARGUMENT,
                      {"sampling.stop[1]: not valid UTF-8"}));

  v1::GenerateRequest rid = LongRequest(4);
  rid.set_request_id("id-\xed\xa0\x80");  // a UTF-8-encoded surrogate
  EXPECT_TRUE(
      Refused(RunGenerate(f->stub(), rid), StatusCode::INVALID_ARGUMENT, {"request_id: not valid UTF-8"}));
  {
    v1::TokenizeResponse tresp;
    const grpc::Status ts = f->Tokenize("\xff", &tresp);
    EXPECT_EQ(ts.error_code(), StatusCode::INVALID_ARGUMENT) << ts.error_message();
    EXPECT_NE(ts.error_message().find("text: not valid UTF-8"), std::string::npos) << ts.error_message();
  }

  // The server is unharmed and counted each refusal as an invalid request, with no model work.
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), LongRequest(4)), 4));
  auto delta = [&](const Scrape& s, const std::string& name, const std::map<std::string, std::string>& m) {
    return s.Count(name, m) - before.Count(name, m);
  };
  const std::map<std::string, std::string> generate_bad = {{"rpc", "Generate"}, {"code", "INVALID_ARGUMENT"}};
  const Scrape after = f->WaitMetrics([&](const Scrape& s) {
    return delta(s, "frost_requests_total", {{"rpc", "Generate"}, {"code", "OK"}}) == 1 &&
           delta(s, "frost_requests_total", generate_bad) == 3;
  });
  EXPECT_EQ(delta(after, "frost_requests_total", generate_bad), 3);
  EXPECT_EQ(delta(after, "frost_requests_total", {{"rpc", "Tokenize"}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(delta(after, "frost_requests_rejected_total", {{"reason", "invalid_argument"}}), 3);
  EXPECT_EQ(after.Count("frost_generations_total") - before.Count("frost_generations_total"), 1);
  EXPECT_TRUE(f->Alive());
}

// ================================================================================================ 6. metrics

class GrpcE2eMetrics : public E2eTest {};

TEST_F(GrpcE2eMetrics, CountersMatchWhatTheClientSaw) {
  Frostd* f = Own(std::make_unique<Frostd>());
  ASSERT_TRUE(f->Start(FrostdOptions()));

  int completion = 0, prompt = 0;
  const std::vector<std::string> prompts = {"a", "hello", "Once upon a time"};
  const std::vector<int> lengths = {3, 5, 9};
  for (size_t i = 0; i < prompts.size(); ++i) {
    const StreamOutcome o = RunGenerate(f->stub(), LongRequest(lengths[i], i + 1, prompts[i]));
    ASSERT_TRUE(CompletedWithLength(o, lengths[i]));
    EXPECT_EQ(o.final.prompt_tokens(), static_cast<int32_t>(prompts[i].size()) + 1);  // BOS + bytes
    completion += static_cast<int>(o.ids.size());
    prompt += o.final.prompt_tokens();
  }
  v1::GenerateRequest bad = LongRequest(0);
  EXPECT_TRUE(Refused(RunGenerate(f->stub(), bad), StatusCode::INVALID_ARGUMENT, {"max_new_tokens"}));
  {
    v1::TokenizeResponse resp;
    ASSERT_TRUE(f->Tokenize("hello", &resp).ok());
    EXPECT_EQ(resp.token_ids_size(), 6);
  }

  // Requests are counted when the server finishes them, which may be just after the client got its status.
  const Scrape m = f->WaitMetrics([](const Scrape& s) {
    return s.Sum("frost_requests_total", {{"rpc", "Generate"}}) == 4 &&
           s.Sum("frost_requests_total", {{"rpc", "Tokenize"}}) == 1;
  });
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m.Sum("frost_requests_total", {{"rpc", "Generate"}, {"code", "OK"}}), 3) << m.text();
  EXPECT_EQ(m.Sum("frost_requests_total", {{"rpc", "Generate"}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(m.Sum("frost_requests_total", {{"rpc", "Generate"}}), 4);
  EXPECT_EQ(m.Sum("frost_requests_total", {{"rpc", "Tokenize"}, {"code", "OK"}}), 1);
  EXPECT_EQ(m.Sum("frost_request_duration_seconds_count", {{"rpc", "Generate"}}), 4);
  EXPECT_EQ(m.Sum("frost_requests_rejected_total", {{"reason", "invalid_argument"}}), 1);
  EXPECT_EQ(m.Sum("frost_requests_rejected_total", {{"reason", "queue_full"}}), 0);
  EXPECT_EQ(m.Sum("frost_requests_rejected_total", {{"reason", "unavailable"}}), 0);
  EXPECT_EQ(m.Sum("frost_generations_total", {{"finish_reason", "length"}}), 3);
  EXPECT_EQ(m.Sum("frost_generations_total"), 3);
  EXPECT_EQ(m.Sum("frost_generation_tokens_total"), completion);
  EXPECT_EQ(m.Sum("frost_prompt_tokens_total"), prompt);
  EXPECT_EQ(m.Sum("frost_time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(m.Sum("frost_e2e_request_latency_seconds_count"), 3);
  EXPECT_EQ(m.Sum("frost_request_queue_time_seconds_count"), 3);
  // One inter-token gap per token after each stream's first.
  EXPECT_EQ(m.Sum("frost_inter_token_latency_seconds_count"), completion - 3);
  EXPECT_EQ(m.Sum("frost_time_to_first_token_seconds_bucket", {{"le", "+Inf"}}), 3);
  EXPECT_GT(m.Sum("frost_time_to_first_token_seconds_sum"), 0);
  EXPECT_EQ(m.Sum("frost_ready"), 1);
  EXPECT_TRUE(m.Idle()) << m.Gauges();
  EXPECT_GT(m.Sum("frost_kv_cache_bytes_per_token"), 0);
  // The batching engine's books: nothing held when idle, the pool's blocks add up, every step counted.
  const double blocks = m.Sum("frost_kv_cache_blocks");
  EXPECT_GT(blocks, 0);
  EXPECT_EQ(m.Sum("frost_kv_cache_blocks", {{"state", "used"}}), 0);
  EXPECT_EQ(m.Sum("frost_kv_cache_blocks", {{"state", "cached"}}) + m.Sum("frost_kv_cache_blocks", {{"state", "free"}}),
            blocks);
  EXPECT_EQ(m.Sum("frost_kv_cache_usage_ratio"), 0);
  EXPECT_EQ(m.Sum("frost_kv_cache_pool_bytes"), blocks * m.Sum("frost_kv_cache_block_bytes"));
  EXPECT_EQ(m.Sum("frost_preemptions_total"), 0);
  // Every admission looked its prompt up in the prefix cache (the warm-up's 2-token prompt included).
  EXPECT_EQ(m.Sum("frost_prefix_cache_queries_tokens_total"), prompt + 1);
  EXPECT_GE(m.Sum("frost_prefix_cache_hits_tokens_total"), 0);
  const double steps = m.Sum("frost_engine_steps_total");
  EXPECT_GE(steps, completion);  // one step per generated token at least (streams ran one at a time)
  EXPECT_EQ(m.Sum("frost_batch_size_count"), steps);
  EXPECT_EQ(m.Sum("frost_batch_tokens_count"), steps);
  EXPECT_EQ(m.Sum("frost_batch_tokens_sum"), prompt + completion - 3 + 1 + 1);  // + warm-up: 1 prompt row, 1 decode
  EXPECT_GT(m.Sum("frost_engine_step_seconds_total", {{"phase", "forward"}}), 0);

  // The exposition is valid Prometheus text (promtool from the Debian prometheus package).
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    std::cerr << "[  NOTE    ] promtool not on PATH: `promtool check metrics` part skipped\n";
  } else {
    testing::TempDir dir("frost_e2e_promtool");
    testing::write_text_file(dir.file("metrics.txt"), m.text());
    const std::string cmd =
        "promtool check metrics < " + dir.file("metrics.txt") + " > " + dir.file("promtool.out") + " 2>&1";
    const int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "promtool check metrics failed:\n"
                                                       << ReadFileOrEmpty(dir.file("promtool.out"));
  }
  EXPECT_TRUE(f->StopCleanly());
}

// ================================================================================================ 7. soak

struct SoakStats {
  int ok = 0, cancelled = 0, cancel_too_late = 0;
};

// `n` concurrent streams on one channel (one blocking reader thread each); `n_cancel` of them, chosen by a
// seeded RNG, are cancelled after a random number of chunks (0-3) or a random delay (0-30 ms).
SoakStats SoakRound(Frostd& f, uint64_t seed, int n, int n_cancel) {
  std::mt19937_64 rng(seed);
  struct Plan {
    int max_new_tokens = 0;
    int cancel_after_chunks = -1;  // >= 0: cancel after that many chunks
    int cancel_after_ms = -1;      // >= 0: cancel after that delay
  };
  std::vector<Plan> plans(n);
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) {
    plans[i].max_new_tokens = std::uniform_int_distribution<int>(16, 48)(rng);
    order[i] = i;
  }
  std::shuffle(order.begin(), order.end(), rng);
  for (int k = 0; k < n_cancel; ++k) {
    Plan& p = plans[order[k]];
    if (k % 2 == 0) {
      p.cancel_after_chunks = std::uniform_int_distribution<int>(0, 3)(rng);
    } else {
      p.cancel_after_ms = std::uniform_int_distribution<int>(0, 30)(rng);
    }
  }

  std::vector<StreamOutcome> out(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      const Plan& p = plans[i];
      StreamHooks hooks;
      hooks.on_start = [&](grpc::ClientContext& ctx) {
        if (p.cancel_after_chunks == 0) ctx.TryCancel();
        if (p.cancel_after_ms >= 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(p.cancel_after_ms));
          ctx.TryCancel();
        }
      };
      hooks.on_chunk = [&](int chunks, grpc::ClientContext& ctx) {
        if (chunks == p.cancel_after_chunks) ctx.TryCancel();
      };
      out[i] =
          RunGenerate(f.stub(), LongRequest(p.max_new_tokens, seed * 1000 + i, "soak " + std::to_string(i)),
                      std::nullopt, hooks);
    });
  }
  for (std::thread& t : threads) t.join();

  SoakStats stats;
  for (int i = 0; i < n; ++i) {
    const Plan& p = plans[i];
    const StreamOutcome& o = out[i];
    const bool cancel = p.cancel_after_chunks >= 0 || p.cancel_after_ms >= 0;
    if (!cancel) {
      EXPECT_TRUE(CompletedWithLength(o, p.max_new_tokens)) << "stream " << i;
      EXPECT_EQ(o.final.prompt_tokens(), static_cast<int32_t>(("soak " + std::to_string(i)).size()) + 1);
      ++stats.ok;
    } else if (o.status.error_code() == StatusCode::CANCELLED) {
      EXPECT_LE(static_cast<int>(o.ids.size()), p.max_new_tokens) << "stream " << i;
      ++stats.cancelled;
    } else {
      // Finished before the cancel landed.
      EXPECT_TRUE(CompletedWithLength(o, p.max_new_tokens)) << "cancelled stream " << i;
      ++stats.cancel_too_late;
    }
  }
  return stats;
}

class GrpcE2eSoak : public E2eTest {};

TEST_F(GrpcE2eSoak, TwoHundredStreamsWithCancelsLeaveNothingBehind) {
  constexpr int kStreams = 200, kCancels = 40;
  // RSS may grow a little after the warm-up round (allocator arenas of the gRPC and engine threads, lazily
  // grown pools); a leak of the KV caches (~64 KiB per builtin:tiny sequence of 512 positions) or of the
  // per-call state of 200 streams would show up as more than this.
  constexpr int64_t kRssMargin = 64 << 20;
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions opts;
  opts.yaml = std::string(kBaseYaml) + "engine:\n  max_running: 8\n  max_waiting: 256\n";
  ASSERT_TRUE(f->Start(opts));

  const auto t0 = Clock::now();
  const SoakStats warm = SoakRound(*f, /*seed=*/1, kStreams, kCancels);
  ASSERT_TRUE(f->Alive()) << f->DescribeExit();
  const Scrape idle1 = f->WaitIdle();
  ASSERT_TRUE(idle1.Idle()) << "after the warm-up round: " << idle1.Gauges();
  const int64_t rss_base = f->RssBytes();
  const double warm_s = SecondsSince(t0);

  const auto t1 = Clock::now();
  const SoakStats soak = SoakRound(*f, /*seed=*/2, kStreams, kCancels);
  const double soak_s = SecondsSince(t1);
  ASSERT_TRUE(f->Alive()) << f->DescribeExit();
  EXPECT_EQ(soak.ok, kStreams - kCancels);
  EXPECT_EQ(soak.cancelled + soak.cancel_too_late, kCancels);
  // Most cancels land while the stream still waits or runs (8 run at a time, 200 queued).
  EXPECT_GE(soak.cancelled, kCancels / 2);
  EXPECT_GE(warm.cancelled, kCancels / 2);

  // Accounting, server side. Every call ended OK or CANCELLED. Every generation belongs to a call that
  // finished its RPC (a reactor that never finishes would leave a generation without its request); the calls
  // without a generation are those the client cancelled before their request message even arrived. The
  // client-side and server-side views differ only by races at the cancel: a stream can finish (generation
  // "length") just before the client's cancel lands, and the call then ends OK on the server but CANCELLED
  // on the client, or CANCELLED on both if the final message was not yet written. (A call the client cancels
  // right after starting it may also be reset before gRPC hands it to the service: it appears in no count.)
  const std::map<std::string, std::string> ok_code = {{"rpc", "Generate"}, {"code", "OK"}};
  const std::map<std::string, std::string> cancelled_code = {{"rpc", "Generate"}, {"code", "CANCELLED"}};
  const double want_ok = 2 * (kStreams - kCancels) + warm.cancel_too_late + soak.cancel_too_late;
  const Scrape idle2 = f->WaitMetrics([&](const Scrape& s) {
    return s.Idle() && s.Count("frost_requests_total", ok_code) >= want_ok &&
           s.Sum("frost_requests_total", {{"rpc", "Generate"}}) >= s.Sum("frost_generations_total");
  });
  EXPECT_TRUE(idle2.Idle()) << "after the soak round: " << idle2.Gauges();
  const double seen = idle2.Sum("frost_requests_total", {{"rpc", "Generate"}});
  const double n_ok = idle2.Count("frost_requests_total", ok_code);
  const double n_cancelled = idle2.Count("frost_requests_total", cancelled_code);
  const double gen_total = idle2.Sum("frost_generations_total");
  const double gen_length = idle2.Count("frost_generations_total", {{"finish_reason", "length"}});
  const double gen_cancelled = idle2.Count("frost_generations_total", {{"finish_reason", "cancelled"}});
  EXPECT_LE(seen, 2 * kStreams) << idle2.text();
  EXPECT_EQ(n_ok + n_cancelled, seen) << idle2.text();
  EXPECT_EQ(gen_length + gen_cancelled, gen_total) << idle2.text();
  EXPECT_GE(n_ok, want_ok);               // every OK the clients saw, the server counted
  EXPECT_LE(n_ok, gen_length);            // every OK call ran its generation to the end
  EXPECT_LE(gen_cancelled, n_cancelled);  // every generation the client cancelled is a CANCELLED call
  EXPECT_LE(gen_length - n_ok, 2 * kCancels);
  EXPECT_GE(seen, gen_total);
  const double cancelled_before_request = seen - gen_total;
  EXPECT_LE(cancelled_before_request, 2 * kCancels);
  EXPECT_EQ(idle2.Count("frost_requests_rejected_total"), 0) << idle2.text();
  EXPECT_EQ(idle2.Sum("frost_requests_rejected_total", {{"reason", "queue_full"}}), 0);
  const int64_t rss_after = f->RssBytes();
  std::cerr << "soak: warm-up round " << warm_s << " s (" << warm.ok << " ok, " << warm.cancelled
            << " cancelled, " << warm.cancel_too_late << " completed before the cancel), soak round "
            << soak_s << " s (" << soak.ok << " ok, " << soak.cancelled << " cancelled, "
            << soak.cancel_too_late << " completed before the cancel); " << seen
            << " calls reached the service, " << cancelled_before_request
            << " of them cancelled before their request arrived; frostd VmRSS " << (rss_base >> 10)
            << " KiB after warm-up, " << (rss_after >> 10) << " KiB after soak (margin " << (kRssMargin >> 20)
            << " MiB)\n";
  ASSERT_GT(rss_base, 0);
  EXPECT_LE(rss_after, rss_base + kRssMargin);
  EXPECT_TRUE(f->StopCleanly());
}

// ================================================================================================ 8.
// reflection

namespace refl = grpc::reflection::v1alpha;

// One request on a fresh ServerReflectionInfo stream, as grpcurl sends it; the status and the response.
grpc::Status Reflect(Frostd& f, const refl::ServerReflectionRequest& req,
                     refl::ServerReflectionResponse* resp) {
  auto stub = refl::ServerReflection::NewStub(f.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->ServerReflectionInfo(&ctx);
  stream->Write(req);
  stream->WritesDone();
  const bool got = stream->Read(resp);
  const grpc::Status st = stream->Finish();
  if (st.ok() && !got) return grpc::Status(grpc::StatusCode::UNKNOWN, "no reflection response");
  return st;
}

class GrpcE2eReflection : public E2eTest {};

TEST_F(GrpcE2eReflection, ListsServicesAndDescribesGenerate) {
  Frostd* f = Own(std::make_unique<Frostd>());
  ASSERT_TRUE(f->Start(FrostdOptions()));

  refl::ServerReflectionRequest list;
  list.set_list_services("");
  refl::ServerReflectionResponse resp;
  grpc::Status st = Reflect(*f, list, &resp);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  std::vector<std::string> names;
  for (const refl::ServiceResponse& svc : resp.list_services_response().service())
    names.push_back(svc.name());
  for (const char* want : {"frost.v1.Generation", "grpc.health.v1.Health"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want << " not listed";
  }

  // The file defining frost.v1.Generation, as grpcurl fetches it to build a request: it has the three methods
  // with their real message types, and Generate is server streaming.
  refl::ServerReflectionRequest sym;
  sym.set_file_containing_symbol("frost.v1.Generation");
  st = Reflect(*f, sym, &resp);
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  ASSERT_FALSE(resp.has_error_response()) << resp.error_response().error_message();
  bool found = false;
  for (const std::string& bytes : resp.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    if (file.name() != "frost/v1/generation.proto") continue;
    found = true;
    ASSERT_EQ(file.service_size(), 1);
    std::map<std::string, const google::protobuf::MethodDescriptorProto*> methods;
    for (const auto& m : file.service(0).method()) methods[m.name()] = &m;
    ASSERT_EQ(methods.size(), 3u);
    ASSERT_TRUE(methods.count("Generate"));
    EXPECT_EQ(methods["Generate"]->input_type(), ".frost.v1.GenerateRequest");
    EXPECT_EQ(methods["Generate"]->output_type(), ".frost.v1.GenerateResponse");
    EXPECT_TRUE(methods["Generate"]->server_streaming());
    EXPECT_TRUE(methods.count("Tokenize") && methods.count("GetModelInfo"));
  }
  EXPECT_TRUE(found) << "frost/v1/generation.proto not among the returned files";
  EXPECT_TRUE(f->StopCleanly());
}

TEST_F(GrpcE2eReflection, ConfigFlagTurnsItOff) {
  Frostd* f = Own(std::make_unique<Frostd>());
  FrostdOptions opts;
  opts.yaml = std::string(kBaseYaml) + "server:\n  reflection: false\n";
  ASSERT_TRUE(f->Start(opts));
  refl::ServerReflectionRequest list;
  list.set_list_services("");
  refl::ServerReflectionResponse resp;
  const grpc::Status st = Reflect(*f, list, &resp);
  EXPECT_EQ(st.error_code(), StatusCode::UNIMPLEMENTED) << st.error_message();
  // Serving is unaffected.
  EXPECT_TRUE(CompletedWithLength(RunGenerate(f->stub(), LongRequest(3)), 3));
  EXPECT_TRUE(f->StopCleanly());
}

}  // namespace
}  // namespace frost
