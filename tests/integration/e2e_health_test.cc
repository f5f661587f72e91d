// End-to-end tests of frostd's health service and shutdown (harness: tests/testing/e2e_harness.h):
// liveness before readiness while the model loads, the drain on SIGTERM (in-flight streams finish, or are
// cancelled with a final at the drain deadline), and a prompt exit when idle.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "tests/testing/e2e_harness.h"

namespace frost::e2e {
namespace {

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

}  // namespace
}  // namespace frost::e2e
