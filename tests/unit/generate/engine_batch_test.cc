// Continuous batching on the paged KV cache (core/generate/engine.h, scheduler.h), on builtin:tiny:
//  - batched output equals unbatched output token for token for a mix of prompts, lengths, KV codecs, a
//    repair operator and a KVSplice set in the same steps;
//  - 1,000 seeded random schedules of arrivals, cancels, deadlines and finishes keep the block books exact
//    (audited after every step) and end every stream exactly once with its reason;
//  - a pool too small for the load preempts (and the outputs do not change); a request that can never fit
//    is refused at submit naming the limit;
//  - the prefix cache: shared prefixes give the same output as cold runs, the hit counter equals the shared
//    full blocks exactly, and eviction under pressure keeps serving correctly.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/generate/engine.h"
#include "core/model/kv_dims.h"
#include "core/model/model_loader.h"
#include "tests/testing/test_util.h"
#include "tests/testing/kv_slots.h"
#include "tests/testing/recording_sink.h"

namespace frost {
namespace {

// Collects one stream; optionally cancels its own request at its n-th token (a deterministic cancel point).
using Sink = testing::RecordingSink;

std::vector<int32_t> ids_of(int64_t n, int64_t salt, int64_t vocab = 512) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(3 + (i * 31 + salt * 97) % (vocab - 3)));
  return v;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int32_t n) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.params.max_new_tokens = n;
  r.params.temperature = 0;
  r.params.ignore_eos = true;
  return r;
}

class EngineBatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model("builtin:tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::shared_ptr<const LoadedModel>(std::move(m).value());
  }
  static void TearDownTestSuite() { model_.reset(); }

  static EngineConfig config(int32_t running, int64_t pool_bytes = 0, bool prefix = true) {
    EngineConfig c;
    c.max_running = running;
    c.max_waiting = 4096;
    c.max_batch_tokens = std::max<int64_t>(running, 48);
    c.kv_cache_bytes = pool_bytes;
    c.prefix_caching = prefix;
    c.audit_kv = true;  // the block books are checked after every step (FROST_CHECK)
    return c;
  }
  static std::unique_ptr<Engine> make(const EngineConfig& c) {
    auto e = Engine::create(model_, c);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(e).value();
  }
  // Runs the requests concurrently on `engine` and returns every stream.
  static std::vector<std::shared_ptr<Sink>> run_all(Engine& engine, const std::vector<GenerationRequest>& reqs) {
    std::vector<std::shared_ptr<Sink>> sinks;
    for (const auto& r : reqs) {
      auto s = std::make_shared<Sink>();
      EXPECT_TRUE(engine.submit(r, s, std::make_shared<CancelToken>()).ok());
      sinks.push_back(s);
    }
    for (auto& s : sinks) EXPECT_TRUE(s->wait(60));
    EXPECT_TRUE(engine.wait_idle(10));
    return sinks;
  }
  // Each request alone on a fresh engine (one sequence per step, no prefix cache): the unbatched reference.
  static std::vector<std::vector<int32_t>> run_alone(const std::vector<GenerationRequest>& reqs,
                                                     RepairSlot* repair = nullptr, KvSpliceSlot* splice = nullptr) {
    EngineConfig c = config(1, 0, false);
    c.kv_repair = repair;
    c.kv_splice = splice;
    auto engine = make(c);
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : reqs) out.push_back(run_all(*engine, {r})[0]->ids);
    return out;
  }
  static void expect_idle_books(const Engine& e) {
    const EngineStats s = e.stats();
    EXPECT_EQ(s.n_running, 0);
    EXPECT_EQ(s.n_waiting, 0);
    EXPECT_EQ(s.kv_blocks_used, 0);  // every block free or cached
    EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total);
    EXPECT_EQ(s.kv_bytes_in_use, 0);
  }
  static std::shared_ptr<const LoadedModel> model_;
};
std::shared_ptr<const LoadedModel> EngineBatchTest::model_;

TEST_F(EngineBatchTest, BatchedEqualsUnbatchedAcrossCodecsRepairAndKvSplice) {
  // A repair operator for int4 and a KVSplice set, both active.
  const std::unique_ptr<testing::KvSlots> slots = testing::make_kv_slots(model_->config);
  ASSERT_NE(slots, nullptr);
  RepairSlot& repair = slots->repair;
  KvSpliceSlot& splice = slots->splice;

  std::vector<GenerationRequest> reqs;
  const KvCodecKind codecs[] = {KvCodecKind::kF32, KvCodecKind::kInt8, KvCodecKind::kInt4, KvCodecKind::kKvSplice,
                                KvCodecKind::kF16, KvCodecKind::kBF16};
  const int64_t lens[] = {1, 7, 16, 17, 40, 90, 3, 33, 64, 5, 150, 12};
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r = greedy(ids_of(lens[i], i), 10 + 3 * i);
    r.kv_codec = codecs[i % 6];
    if (i % 2) {  // seeded sampling too: the sampler state is per sequence, whatever the batch
      r.params.temperature = 0.9f;
      r.params.top_p = 0.95f;
      r.params.seed = 100 + i;
    }
    reqs.push_back(r);
  }
  EngineConfig c = config(8);
  c.max_batch_tokens = 24;  // long prompts are chunked and mixed with the decode rows of others
  c.kv_repair = &repair;
  c.kv_splice = &splice;
  auto engine = make(c);
  const auto sinks = run_all(*engine, reqs);
  const auto want = run_alone(reqs, &repair, &splice);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(sinks[i]->result.ok()) << sinks[i]->result.status();
    EXPECT_EQ(sinks[i]->ids, want[i]) << "request " << i << " codec " << kv_codec_name(*reqs[i].kv_codec);
    EXPECT_EQ(sinks[i]->result->kv_repair, *reqs[i].kv_codec == KvCodecKind::kInt4 ? "kv_repair/1" : "");
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.batch_size.sum / static_cast<double>(s.batch_size.count), 2.0) << "steps really were batched";
  EXPECT_GT(s.batch_tokens.count, 0u);
  expect_idle_books(*engine);
}

TEST_F(EngineBatchTest, GreedyEngineOutputEqualsTheGenerator) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(greedy(ids_of(5 + 9 * i, i), 20));
  auto engine = make(config(4));
  const auto sinks = run_all(*engine, reqs);
  GeneratorConfig gc;
  Generator gen(*model_, gc);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CancelToken c;
    auto want = gen.generate(reqs[i], nullptr, c);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(sinks[i]->ids, want->ids) << i;
    EXPECT_EQ(sinks[i]->text, want->text) << i;
  }
}

TEST_F(EngineBatchTest, ThousandRandomSchedulesKeepTheBooksAndEndEveryStreamOnce) {
  // Reference outputs for the greedy requests the schedules draw from (prompt i, up to 24 tokens).
  std::vector<GenerationRequest> base;
  for (int i = 0; i < 8; ++i) base.push_back(greedy(ids_of(1 + (i * 13) % 60, i), 24));
  const auto want = run_alone(base);
  // A small pool (so some schedules preempt), shared by all schedules through one engine per schedule.
  const int64_t block = 16 * 2 * 2 * 2 * 16 * 4;  // tiny: 2 layers × K,V × 2 kv heads × 16 dims × fp32, 16 positions
  std::mt19937_64 rng(20261124);
  uint64_t preemptions = 0, cancelled = 0, deadlines = 0, completed = 0;
  for (int schedule = 0; schedule < 1000; ++schedule) {
    const int32_t running = 1 + static_cast<int32_t>(rng() % 6);
    const int64_t pool_blocks = 6 + static_cast<int64_t>(rng() % 20);
    auto engine = make(config(running, pool_blocks * block, rng() % 2 == 0));
    const int n = 1 + static_cast<int>(rng() % 7);
    struct Req {
      int base;
      std::shared_ptr<Sink> sink;
      std::shared_ptr<CancelToken> cancel;
      int cancel_at, max_tokens;
      bool deadline;
    };
    std::vector<Req> reqs;
    for (int i = 0; i < n; ++i) {
      Req r;
      r.base = static_cast<int>(rng() % base.size());
      r.cancel = std::make_shared<CancelToken>();
      r.cancel_at = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 10) : -1;
      r.max_tokens = 1 + static_cast<int>(rng() % 24);
      r.deadline = rng() % 10 == 0;
      if (r.deadline) r.cancel->set_timeout_s(static_cast<double>(rng() % 3000) * 1e-6);
      r.sink = std::make_shared<Sink>(r.cancel, r.cancel_at);
      GenerationRequest g = base[static_cast<size_t>(r.base)];
      g.params.max_new_tokens = r.max_tokens;
      const absl::Status st = engine->submit(g, r.sink, r.cancel);
      ASSERT_TRUE(st.ok()) << st;  // the pool always holds one request alone
      reqs.push_back(r);
      if (rng() % 3 == 0) absl::SleepFor(absl::Microseconds(static_cast<int64_t>(rng() % 300)));  // arrivals spread
      if (rng() % 8 == 0) reqs[static_cast<size_t>(rng() % reqs.size())].cancel->cancel();  // cancel from outside
    }
    for (auto& r : reqs) {
      ASSERT_TRUE(r.sink->wait(60)) << "schedule " << schedule;
      ASSERT_TRUE(r.sink->result.ok()) << r.sink->result.status();
      const GenerationResult& res = *r.sink->result;
      const auto& ref = want[static_cast<size_t>(r.base)];
      ASSERT_LE(static_cast<int>(res.ids.size()), r.max_tokens);
      // whatever it was cut at, what it streamed is a prefix of the reference output
      ASSERT_TRUE(std::equal(res.ids.begin(), res.ids.end(), ref.begin())) << "schedule " << schedule;
      ASSERT_EQ(r.sink->ids, res.ids);
      switch (res.finish_reason) {
        case FinishReason::kLength: ASSERT_EQ(static_cast<int>(res.ids.size()), r.max_tokens); ++completed; break;
        case FinishReason::kCancelled: ++cancelled; break;
        case FinishReason::kDeadline: ASSERT_TRUE(r.deadline); ++deadlines; break;
        case FinishReason::kStop: FAIL() << "ignore_eos requests cannot stop";
      }
    }
    ASSERT_TRUE(engine->wait_idle(10));
    for (auto& r : reqs) ASSERT_EQ(r.sink->n_finish.load(), 1);
    expect_idle_books(*engine);
    const EngineStats s = engine->stats();
    ASSERT_EQ(s.n_finished, static_cast<uint64_t>(n));
    preemptions += s.n_preemptions;
  }
  // The schedules did exercise what they are for.
  EXPECT_GT(preemptions, 0u);
  EXPECT_GT(cancelled, 0u);
  EXPECT_GT(deadlines, 0u);
  EXPECT_GT(completed, 0u);
}

TEST_F(EngineBatchTest, ASmallPoolPreemptsAndTheOutputsDoNotChange) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(greedy(ids_of(20 + 7 * i, i), 60));
  const int64_t block = 16 * 2 * 2 * 2 * 16 * 4;
  auto small = make(config(8, 14 * block));  // 14 blocks: far less than 8 × ~6 blocks
  const auto sinks = run_all(*small, reqs);
  const auto want = run_alone(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(sinks[i]->result.ok()) << sinks[i]->result.status();
    EXPECT_EQ(sinks[i]->result->finish_reason, FinishReason::kLength);
    EXPECT_EQ(sinks[i]->ids, want[i]) << i;
  }
  const EngineStats s = small->stats();
  EXPECT_GT(s.n_preemptions, 0u);
  EXPECT_EQ(s.kv_blocks_total, 14);
  expect_idle_books(*small);
}

TEST_F(EngineBatchTest, ARequestThatCanNeverFitIsRefusedNamingTheLimit) {
  const int64_t block = 16 * 2 * 2 * 2 * 16 * 4;
  auto engine = make(config(2, 4 * block));  // 4 blocks: 64 positions at fp32
  auto sink = std::make_shared<Sink>();
  absl::Status st = engine->submit(greedy(ids_of(50, 1), 20), sink, std::make_shared<CancelToken>());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("= 70 tokens need 5 KV blocks of 16 positions (codec fp32) but the KV "
                                           "pool holds 4 blocks (engine.kv_cache_bytes = 32768)"),
            std::string::npos)
      << st;
  EXPECT_EQ(sink->n_finish.load(), 0);
  // The same request fits with a compact codec: int4 packs more positions into each block.
  GenerationRequest r = greedy(ids_of(50, 1), 20);
  r.kv_codec = KvCodecKind::kInt4;
  const auto sinks = run_all(*engine, {r});
  ASSERT_TRUE(sinks[0]->result.ok()) << sinks[0]->result.status();
  EXPECT_EQ(sinks[0]->ids.size(), 20u);
}

TEST_F(EngineBatchTest, PrefixCacheHitsExactlyTheSharedBlocksAndChangesNothing) {
  const std::vector<int32_t> system = ids_of(40, 77);  // 2 full blocks of 16 + 8 positions
  auto with_suffix = [&](int64_t salt, int64_t n) {
    std::vector<int32_t> p = system;
    for (int32_t t : ids_of(n, salt)) p.push_back(t);
    return p;
  };
  std::vector<GenerationRequest> reqs = {greedy(with_suffix(1, 5), 12), greedy(with_suffix(2, 30), 12),
                                         greedy(with_suffix(3, 1), 12)};
  auto engine = make(config(4));
  // First request alone: it publishes its full blocks (the shared 40 tokens span blocks 0 and 1 fully).
  const auto first = run_all(*engine, {reqs[0]});
  const EngineStats s0 = engine->stats();
  EXPECT_EQ(s0.prefix_hits_tokens, 0u);
  EXPECT_EQ(s0.prefix_queries_tokens, 45u);
  // The others share exactly 32 positions (2 blocks) with it: the 3rd block differs after position 40.
  const auto rest = run_all(*engine, {reqs[1], reqs[2]});
  const EngineStats s1 = engine->stats();
  EXPECT_EQ(s1.prefix_hits_tokens, 64u);  // 2 requests × 2 blocks × 16
  EXPECT_EQ(s1.prefix_queries_tokens, 45u + 70u + 41u);
  // Cold runs (no prefix cache) give the same tokens.
  const auto cold = run_alone(reqs);
  EXPECT_EQ(first[0]->ids, cold[0]);
  EXPECT_EQ(rest[0]->ids, cold[1]);
  EXPECT_EQ(rest[1]->ids, cold[2]);
  // The same request again hits every full block of its prompt + nothing else (here: its first 2 blocks;
  // the last token is always recomputed).
  run_all(*engine, {reqs[2]});
  EXPECT_EQ(engine->stats().prefix_hits_tokens, 64u + 32u);
  expect_idle_books(*engine);
}

TEST_F(EngineBatchTest, EvictionUnderPressureKeepsServingCorrectly) {
  const int64_t block = 16 * 2 * 2 * 2 * 16 * 4;
  auto engine = make(config(3, 12 * block));
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back(greedy(ids_of(33 + i, i % 4), 20));  // prefixes repeat every 4
  std::vector<std::shared_ptr<Sink>> all;
  for (int round = 0; round < 3; ++round)
    for (auto& s : run_all(*engine, reqs)) all.push_back(s);
  const auto want = run_alone(reqs);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i]->ids, want[i % reqs.size()]) << i;
  const EngineStats s = engine->stats();
  EXPECT_GT(s.prefix_hits_tokens, 0u);
  expect_idle_books(*engine);
  EXPECT_GT(s.kv_blocks_cached, 0);  // finished sequences left reusable blocks behind
}

}  // namespace
}  // namespace frost
