#pragma once
// Harness of the end-to-end tests of frostd (tests/integration/e2e_*_test.cc): a real frostd process
// (FROST_FROSTD_PATH) started on free ports with a temp YAML config, driven through the generated gRPC C++
// stubs, its health service and its /metrics endpoint.
//
// Each fixture owns one frostd. Fixtures whose tests share a config share the process when the binary runs
// them together; ctest runs every TEST in its own process, so there each test starts its own frostd.
// Timeouts are generous (a loaded 2-core CI machine) but bounded; waits poll instead of sleeping.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "frost/v1/generation.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/test_util.h"

namespace frost::e2e {

using Clock = std::chrono::steady_clock;
using grpc::StatusCode;
using HealthStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

// Health service names: readiness (the model is loaded and not draining) and liveness (the process).
inline constexpr char kReadiness[] = "frost.v1.Generation";
inline constexpr char kLiveness[] = "";

// Intra-op threads: 1 keeps the machine usable for the client threads (and is fastest for these models).
inline constexpr char kBaseYaml[] = "model:\n  threads: 1\n";

// builtin:15m decodes a few hundred tokens per second on one CPU thread: 1000 tokens keep a stream running
// for seconds.
inline constexpr int kLongTokens = 1000;

double SecondsSince(Clock::time_point t0);

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

// The whole file at `path`; "" when it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);

// ------------------------------------------------------------------------------------------------ /metrics

// One scrape of /metrics, parsed from the Prometheus text format.
class Scrape {
 public:
  struct Sample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
  };

  static Scrape Parse(std::string text);
  static Scrape Failed(std::string error);

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& text() const { return text_; }

  // Sum of the samples named `name` whose labels include every pair of `match`; NaN when none matches (so
  // a missing metric never compares equal to anything).
  double Sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const;
  // Sum() for counters whose label sets appear on first use: absent counts as 0.
  double Count(const std::string& name, const std::map<std::string, std::string>& match = {}) const;

  // The engine gauges are at their idle values: nothing running or waiting, no KV cache allocated.
  bool Idle() const;
  // The engine gauges (and the scrape error, if any), for failure messages.
  std::string Gauges() const;

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
  // Given: passed as --config as it is (yaml is then unused), e.g. a directory or a FIFO.
  std::string config_path;
  // Given: --state-dir (default: a fresh directory of the test).
  std::string state_dir;
  // false: Spawn returns once the process exists, without waiting for its port file (no channel then).
  bool wait_for_ports = true;
};

// One frostd child process, with a gRPC channel and stubs to it; killed (SIGKILL) by the destructor if it
// still runs.
class Frostd {
 public:
  Frostd();
  ~Frostd();
  Frostd(const Frostd&) = delete;
  Frostd& operator=(const Frostd&) = delete;

  // Spawns frostd and waits (up to 60 s) for its port file; the model may still be loading.
  ::testing::AssertionResult Spawn(const FrostdOptions& o);
  // Polls readiness until SERVING.
  ::testing::AssertionResult WaitReady(double timeout_s = 60);
  // Spawn() then WaitReady().
  ::testing::AssertionResult Start(const FrostdOptions& o);

  // grpc.health.v1.Health/Check of `service`.
  grpc::Status Check(const std::string& service, HealthStatus* out);

  Scrape Metrics() const;
  // Scrapes until `pred` holds (up to `timeout_s`); the last scrape.
  Scrape WaitMetrics(const std::function<bool(const Scrape&)>& pred, double timeout_s = 10) const;
  Scrape WaitIdle(double timeout_s = 10) const;

  bool Alive();
  // Sends SIGTERM (no wait).
  void Terminate();
  // Waits for the process to exit; its wait status, or nullopt after `timeout_s`.
  std::optional<int> WaitExit(double timeout_s);
  // Sends SIGTERM (the client channel stays open, as a long-lived client's would) and waits for the exit;
  // SIGKILL (and a failure) when it takes over `timeout_s`. *seconds gets the time from SIGTERM to the exit.
  ::testing::AssertionResult StopCleanly(double timeout_s = 60, double* seconds = nullptr);
  // Waits (after a SIGTERM was sent) for the exit and wants status 0; SIGKILL (and a failure) when it takes
  // over `timeout_s`.
  ::testing::AssertionResult WaitCleanExit(double timeout_s);
  std::string DescribeExit() const;

  // VmRSS of the process in bytes (0 when unreadable).
  int64_t RssBytes() const;

  // Prints (the tail of) frostd's stdout/stderr to stderr.
  void PrintLog() const;
  // frostd's stdout/stderr so far.
  std::string LogText() const { return ReadFileOrEmpty(log_path_); }

  // Generation.Tokenize of `text` (add_bos unset), bounded by a 30 s deadline.
  grpc::Status Tokenize(const std::string& text, v1::TokenizeResponse* resp);

  // Closes this client's channel (the stubs become unusable).
  void Disconnect();

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

// One Generate call, read to the end. Every call is bounded (`deadline`, 180 s by default): a hang fails the
// test instead of stalling it.
StreamOutcome RunGenerate(v1::Generation::Stub& stub, const v1::GenerateRequest& req,
                          std::optional<std::chrono::milliseconds> deadline = std::nullopt,
                          const StreamHooks& hooks = {});

// A one-line summary of `o`, for failure messages.
std::string Describe(const StreamOutcome& o);

// A stream that completed: OK, exactly one final (last), FINISH_REASON_LENGTH, counts consistent.
::testing::AssertionResult CompletedWithLength(const StreamOutcome& o, int max_new_tokens);

// A long generation that ignores EOS: random weights never stop early.
v1::GenerateRequest LongRequest(int max_new_tokens, uint64_t seed = 1,
                                const std::string& prompt = "Once upon");

// A call that was refused: `code`, a message holding every one of `parts`, and no stream messages.
::testing::AssertionResult Refused(const StreamOutcome& o, StatusCode code,
                                   const std::vector<std::string>& parts);

// ------------------------------------------------------------------------------------------------ fixtures

// Prints the log of every frostd the test used when it failed (always with FROST_E2E_LOGS=1 in the
// environment).
class E2eTest : public ::testing::Test {
 protected:
  void TearDown() override;
  // A frostd owned by this test (not shared).
  Frostd* Own(std::unique_ptr<Frostd> f);
  // A frostd used (not owned) by this test, e.g. a fixture's SharedFrostd.
  Frostd* Use(Frostd* f);

 private:
  std::vector<const Frostd*> used_;
  std::vector<std::unique_ptr<Frostd>> owned_;
};

// One frostd per fixture, shared by the fixture's tests, started by the first test that needs it.
struct SharedFrostd {
  std::unique_ptr<Frostd> frostd;
  std::string error;  // why it could not start (then every test of the fixture fails with it)

  Frostd* Get(const FrostdOptions& o);
  // SIGTERM with nothing in flight: frostd must exit 0.
  void Stop();
};

}  // namespace frost::e2e

// In an E2eTest: `Frostd* var`, the frostd of `shared` (a SharedFrostd) started with `options`; the test
// fails (fatally) when it could not start.
#define FROST_USE_SHARED(var, shared, options)                           \
  ::frost::e2e::Frostd* var = (shared).Get(options);                     \
  ASSERT_NE(var, nullptr) << "frostd did not start: " << (shared).error; \
  Use(var)
