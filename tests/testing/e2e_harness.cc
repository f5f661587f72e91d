#include "tests/testing/e2e_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <utility>

extern char** environ;

namespace frost::e2e {

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ------------------------------------------------------------------------------------------------ /metrics

namespace {

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

}  // namespace

Scrape Scrape::Parse(std::string text) {
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

Scrape Scrape::Failed(std::string error) {
  Scrape s;
  s.error_ = std::move(error);
  return s;
}

double Scrape::Sum(const std::string& name, const std::map<std::string, std::string>& match) const {
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

double Scrape::Count(const std::string& name, const std::map<std::string, std::string>& match) const {
  const double v = Sum(name, match);
  return std::isnan(v) ? 0 : v;
}

bool Scrape::Idle() const {
  return Sum("frost_kv_cache_bytes_in_use") == 0 && Sum("frost_requests_running") == 0 &&
         Sum("frost_requests_waiting") == 0;
}

std::string Scrape::Gauges() const {
  std::ostringstream os;
  os << "running=" << Sum("frost_requests_running") << " waiting=" << Sum("frost_requests_waiting")
     << " kv_bytes=" << Sum("frost_kv_cache_bytes_in_use") << (ok() ? "" : " scrape error: " + error_);
  return os.str();
}

// ------------------------------------------------------------------------------------------------ frostd

Frostd::Frostd() : dir_("frost_e2e") {}

Frostd::~Frostd() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

::testing::AssertionResult Frostd::Spawn(const FrostdOptions& o) {
  const std::string config = dir_.file("frostd.yaml"), ports = dir_.file("ports");
  log_path_ = dir_.file("frostd.log");
  if (o.config_path.empty()) testing::write_text_file(config, o.yaml.empty() ? std::string(kBaseYaml) : o.yaml);
  std::vector<std::string> args = {FROST_FROSTD_PATH,
                                   "--config",
                                   o.config_path.empty() ? config : o.config_path,
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--metrics-listen",
                                   "127.0.0.1:0",
                                   "--port-file",
                                   ports,
                                   "--model",
                                   o.model,
                                   "--state-dir",
                                   o.state_dir.empty() ? dir_.file("state") : o.state_dir};
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
  if (!o.wait_for_ports) return ::testing::AssertionSuccess();

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

::testing::AssertionResult Frostd::WaitReady(double timeout_s) {
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
           << "readiness not SERVING within " << timeout_s << " s; last: status " << st.error_code() << " \""
           << st.error_message() << "\", serving status " << last;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Frostd::Start(const FrostdOptions& o) {
  ::testing::AssertionResult r = Spawn(o);
  return r ? WaitReady() : r;
}

grpc::Status Frostd::Check(const std::string& service, HealthStatus* out) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = health_->Check(&ctx, req, &resp);
  *out = resp.status();
  return st;
}

Scrape Frostd::Metrics() const {
  std::string error;
  std::optional<std::string> body = HttpGet(metrics_port_, "/metrics", &error);
  return body ? Scrape::Parse(std::move(*body)) : Scrape::Failed(error);
}

Scrape Frostd::WaitMetrics(const std::function<bool(const Scrape&)>& pred, double timeout_s) const {
  Scrape last = Scrape::Failed("no scrape");
  PollUntil(timeout_s, [&] {
    last = Metrics();
    return last.ok() && pred(last);
  });
  return last;
}

Scrape Frostd::WaitIdle(double timeout_s) const {
  return WaitMetrics([](const Scrape& s) { return s.Idle(); }, timeout_s);
}

bool Frostd::Alive() {
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

void Frostd::Terminate() {
  if (pid_ > 0) kill(pid_, SIGTERM);
}

std::optional<int> Frostd::WaitExit(double timeout_s) {
  PollUntil(
      timeout_s, [&] { return !Alive(); }, 0.01);
  return pid_ > 0 ? std::nullopt : exit_status_;
}

::testing::AssertionResult Frostd::StopCleanly(double timeout_s, double* seconds) {
  if (pid_ <= 0 && !exit_status_) return ::testing::AssertionFailure() << "frostd was never started";
  const auto t0 = Clock::now();
  Terminate();
  ::testing::AssertionResult r = WaitCleanExit(timeout_s);
  if (seconds != nullptr) *seconds = SecondsSince(t0);
  std::cerr << "[  frostd  ] " << DescribeExit() << " " << SecondsSince(t0) << " s after SIGTERM\n";
  return r;
}

::testing::AssertionResult Frostd::WaitCleanExit(double timeout_s) {
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

std::string Frostd::DescribeExit() const {
  if (!exit_status_) return "still running";
  const int st = *exit_status_;
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("killed by signal ") + strsignal(WTERMSIG(st));
  return "wait status " + std::to_string(st);
}

int64_t Frostd::RssBytes() const {
  std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  }
  return 0;
}

void Frostd::PrintLog() const {
  std::string log = ReadFileOrEmpty(log_path_);
  constexpr size_t kMax = 20000;
  if (log.size() > kMax)
    log = "[... " + std::to_string(log.size() - kMax) + " bytes cut]\n" + log.substr(log.size() - kMax);
  std::cerr << "----- frostd log (" << log_path_ << ", " << DescribeExit() << ") -----\n"
            << log << "----- end of frostd log -----\n";
}

grpc::Status Frostd::Tokenize(const std::string& text, v1::TokenizeResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::TokenizeRequest req;
  req.set_text(text);
  return stub_->Tokenize(&ctx, req, resp);
}

void Frostd::Disconnect() {
  stub_.reset();
  health_.reset();
  channel_.reset();
}

// ------------------------------------------------------------------------------------------------ client

StreamOutcome RunGenerate(v1::Generation::Stub& stub, const v1::GenerateRequest& req,
                          std::optional<std::chrono::milliseconds> deadline, const StreamHooks& hooks) {
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

::testing::AssertionResult CompletedWithLength(const StreamOutcome& o, int max_new_tokens) {
  if (!o.status.ok() || !o.has_final || o.after_final != 0 || o.empty_msgs != 0 ||
      o.final.finish_reason() != v1::FINISH_REASON_LENGTH || o.final.completion_tokens() != max_new_tokens ||
      static_cast<int>(o.ids.size()) != max_new_tokens) {
    return ::testing::AssertionFailure()
           << "want OK + final LENGTH with " << max_new_tokens << " tokens; got " << Describe(o);
  }
  return ::testing::AssertionSuccess();
}

v1::GenerateRequest LongRequest(int max_new_tokens, uint64_t seed, const std::string& prompt) {
  v1::GenerateRequest req;
  req.set_text(prompt);
  req.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  req.mutable_sampling()->set_ignore_eos(true);
  req.mutable_sampling()->set_seed(seed);
  return req;
}

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

void E2eTest::TearDown() {
  if (HasFailure() || std::getenv("FROST_E2E_LOGS") != nullptr) {
    for (const Frostd* f : used_) f->PrintLog();
  }
}

Frostd* E2eTest::Own(std::unique_ptr<Frostd> f) {
  used_.push_back(f.get());
  owned_.push_back(std::move(f));
  return owned_.back().get();
}

Frostd* E2eTest::Use(Frostd* f) {
  used_.push_back(f);
  return f;
}

Frostd* SharedFrostd::Get(const FrostdOptions& o) {
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

void SharedFrostd::Stop() {
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

}  // namespace frost::e2e
