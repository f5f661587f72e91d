// End-to-end soak test of frostd (harness: tests/testing/e2e_harness.h): rounds of 200 concurrent streams,
// some cancelled at random, leave no running requests, no KV cache and no RSS growth behind, and the server's
// counts agree with what the clients saw.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/e2e_harness.h"

namespace frost::e2e {
namespace {

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

}  // namespace
}  // namespace frost::e2e
