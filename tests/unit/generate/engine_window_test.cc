// Sliding windows in the serving engine's paged KV cache, on builtin:tiny's weights with a Mistral-style
// window on every layer (W = 24, blocks of 8 positions; KvSpec::window, SequenceKv::release_outside_window):
//  (a) a long generation holds at most ceil(W / bt) + 1 blocks while decoding, and its tokens equal the same
//      request with every block kept (engine.kv_release_window off), token for token;
//  (b) admission and the usage gauge count held blocks: three long sequences that need 3 × 12 blocks without
//      release run together in a 12-block pool with no preemption, and a request whose full length could
//      never fit the pool is admitted because its window does;
//  (c) prefix caching on a sliding model reuses a cached prefix only as an unbroken chain of published blocks
//  and
//      gives what the uncached run gives;
//  (d) cancellation and preemption under release keep the books exact (audited after every step) and free
//      everything exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/generate/engine.h"
#include "core/kv/sequence_kv.h"
#include "core/model/model_loader.h"
#include "core/model/transformer.h"
#include "tests/testing/recording_sink.h"

namespace frost {
namespace {

constexpr int64_t kWindow = 24, kBlockTokens = 8;

using Sink = testing::RecordingSink;

std::vector<int32_t> ids_of(int64_t n, int64_t salt) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>(3 + (i * 31 + salt * 97) % 509));
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

class EngineWindowTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model("builtin:tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    std::unique_ptr<LoadedModel> lm = std::move(m).value();
    ModelConfig cfg = lm->config;
    cfg.window.assign(static_cast<size_t>(cfg.n_layer), kWindow);  // every layer slides: Mistral-style
    ASSERT_TRUE(validate_model_config(cfg).ok());
    lm->model = std::make_unique<Transformer>(cfg, lm->model->weights());
    lm->config = cfg;
    lm->name = "builtin:tiny-sliding";
    model_ = std::shared_ptr<const LoadedModel>(std::move(lm));
    block_bytes_ = kv_pool_block_bytes(model_->model->kv_spec(1, KvCodecKind::kF32), kBlockTokens);
  }
  static void TearDownTestSuite() { model_.reset(); }

  static EngineConfig config(int32_t running, int64_t pool_blocks, bool release, bool prefix = false) {
    EngineConfig c;
    c.max_running = running;
    c.max_waiting = 64;
    c.max_batch_tokens = 48;
    c.kv_block_tokens = kBlockTokens;
    c.kv_cache_bytes = pool_blocks * block_bytes_;
    c.prefix_caching = prefix;
    c.kv_release_window = release;
    c.audit_kv = true;  // the block books are checked after every step (FROST_CHECK)
    return c;
  }
  static std::unique_ptr<Engine> make(const EngineConfig& c) {
    auto e = Engine::create(model_, c);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(e).value();
  }
  static std::vector<std::shared_ptr<Sink>> run_all(Engine& engine,
                                                    const std::vector<GenerationRequest>& reqs,
                                                    std::function<void(const Sink&)> on_tok = nullptr) {
    std::vector<std::shared_ptr<Sink>> sinks;
    for (const auto& r : reqs) {
      auto s = std::make_shared<Sink>(nullptr, -1, on_tok);
      const absl::Status st = engine.submit(r, s, std::make_shared<CancelToken>());
      EXPECT_TRUE(st.ok()) << st;
      sinks.push_back(s);
    }
    for (auto& s : sinks) EXPECT_TRUE(s->wait(120));
    EXPECT_TRUE(engine.wait_idle(10));
    return sinks;
  }
  // Every request alone with every block kept: the reference.
  static std::vector<std::vector<int32_t>> run_kept(const std::vector<GenerationRequest>& reqs) {
    auto engine = make(config(1, 256, false));
    std::vector<std::vector<int32_t>> out;
    for (const auto& r : reqs) out.push_back(run_all(*engine, {r})[0]->ids);
    return out;
  }
  static void expect_idle_books(const Engine& e) {
    const EngineStats s = e.stats();
    EXPECT_EQ(s.n_running, 0);
    EXPECT_EQ(s.n_waiting, 0);
    EXPECT_EQ(s.kv_blocks_used, 0);  // every block free or cached: nothing leaked
    EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total);
    EXPECT_EQ(s.kv_bytes_in_use, 0);
  }
  static std::shared_ptr<const LoadedModel> model_;
  static int64_t block_bytes_;
};
std::shared_ptr<const LoadedModel> EngineWindowTest::model_;
int64_t EngineWindowTest::block_bytes_ = 0;

TEST_F(EngineWindowTest, TheModelPassesItsWindowDownOnlyWhenEveryLayerSlides) {
  EXPECT_EQ(model_->model->kv_spec(64, KvCodecKind::kF32).window, kWindow);
  ModelConfig mixed = model_->config;  // Gemma-style: one global layer keeps every block
  mixed.window[0] = 0;
  EXPECT_EQ(Transformer(mixed, model_->model->weights()).kv_spec(64, KvCodecKind::kF32).window, 0);
  ModelConfig wider = model_->config;  // different windows: the largest decides what is dead
  wider.window[1] = 40;
  EXPECT_EQ(Transformer(wider, model_->model->weights()).kv_spec(64, KvCodecKind::kF32).window, 40);
}

// (a) A 20-token prompt and 200 generated tokens: 220 positions, 28 blocks kept without release.
TEST_F(EngineWindowTest, LongGenerationHoldsItsWindowAndMatchesTheKeptRun) {
  const GenerationRequest req = greedy(ids_of(20, 1), 200);
  const std::vector<int32_t> kept_ids = run_kept({req})[0];
  ASSERT_EQ(kept_ids.size(), 200u);
  // ... and both equal the batch-1 loop on a standalone cache (one private block: nothing ever released),
  // which the window changes: the same weights with full attention give other tokens.
  auto decode_loop = [&](const Transformer& tf) {
    SequenceKv kv(tf.kv_spec(256, KvCodecKind::kF32));
    DecodeScratch scratch;
    const float* logits = nullptr;
    for (int32_t t : req.prompt_ids) logits = tf.decode_step(t, kv, scratch);
    std::vector<int32_t> ids;
    for (int i = 0; i < 200; ++i) {
      ids.push_back(static_cast<int32_t>(std::max_element(logits, logits + model_->config.n_vocab) - logits));
      logits = tf.decode_step(ids.back(), kv, scratch);
    }
    return ids;
  };
  EXPECT_EQ(decode_loop(*model_->model), kept_ids);
  ModelConfig full = model_->config;
  full.window.clear();
  EXPECT_NE(decode_loop(Transformer(full, model_->model->weights())), kept_ids)
      << "the window must matter here";
  for (bool release : {true, false}) {
    auto engine = make(config(1, 64, release));
    std::atomic<int64_t> peak{0}, at_end{0};
    Engine* e = engine.get();
    auto sinks = run_all(*engine, {req}, [&](const Sink& s) {
      const int64_t used = e->stats().kv_blocks_used;
      peak = std::max<int64_t>(peak, used);
      if (s.ids.size() == 190) at_end = used;  // the engine is at most a round ahead: still held
    });
    EXPECT_EQ(sinks[0]->ids, kept_ids) << "release " << release;
    std::printf(
        "[ window ] W %lld, %lld-token blocks, 220 positions, release %s: peak %lld blocks held, %lld near "
        "the "
        "end\n",
        static_cast<long long>(kWindow), static_cast<long long>(kBlockTokens), release ? "on" : "off",
        static_cast<long long>(peak.load()), static_cast<long long>(at_end.load()));
    if (release) {
      // The prefill round holds its 3 blocks; every decode round at most ceil(24 / 8) + 1 = 4.
      EXPECT_LE(peak.load(), kWindow / kBlockTokens + 1);
      EXPECT_GE(at_end.load(), 3);
    } else {
      EXPECT_GE(at_end.load(), 26);  // every block of ~210 positions
    }
    expect_idle_books(*engine);
  }
}

// (b) Three sequences of 20 + 70 positions (12 blocks each without release) in a 12-block pool.
TEST_F(EngineWindowTest, AdmissionAndUsageCountHeldBlocks) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(greedy(ids_of(20, 10 + i), 70));
  const auto kept = run_kept(reqs);
  uint64_t preempted[2] = {0, 0};
  for (bool release : {true, false}) {
    auto engine = make(config(3, 12, release));
    std::atomic<int64_t> peak{0};
    Engine* e = engine.get();
    auto sinks = run_all(*engine, reqs, [&](const Sink&) {
      const EngineStats s = e->stats();
      peak = std::max<int64_t>(peak, s.kv_blocks_used);
      EXPECT_LE(s.kv_blocks_used, s.kv_blocks_total);
    });
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(sinks[i]->ids, kept[i]) << "release " << release << " #" << i;
    preempted[release ? 0 : 1] = engine->stats().n_preemptions;
    std::printf(
        "[ window ] 3 x 90 positions in 12 blocks, release %s: peak %lld blocks held, %llu preemptions\n",
        release ? "on" : "off", static_cast<long long>(peak.load()),
        static_cast<unsigned long long>(engine->stats().n_preemptions));
    expect_idle_books(*engine);
  }
  EXPECT_EQ(preempted[0], 0u) << "with release the three windows fit the pool together";
  EXPECT_GT(preempted[1], 0u) << "without release they cannot";

  // 20 + 300 positions = 40 blocks: refused at submit when every block is kept, served when the window is.
  const GenerationRequest longer = greedy(ids_of(20, 7), 300);
  {
    auto engine = make(config(2, 12, false));
    auto s = std::make_shared<Sink>();
    const absl::Status st = engine->submit(longer, s, std::make_shared<CancelToken>());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  }
  auto engine = make(config(2, 12, true));
  auto sinks = run_all(*engine, {longer});
  EXPECT_EQ(sinks[0]->ids, run_kept({longer})[0]);
  expect_idle_books(*engine);
}

// (c) A 64-token shared prefix, then a second request with its own tail; a filler in between under pressure.
TEST_F(EngineWindowTest, PrefixCacheReusesOnlyWholeChainsAndMatchesTheUncachedRun) {
  std::vector<int32_t> shared = ids_of(64, 3);
  auto with_tail = [&](int64_t salt) {
    std::vector<int32_t> p = shared;
    for (int32_t t : ids_of(4, salt)) p.push_back(t);
    return greedy(p, 40);
  };
  const std::vector<GenerationRequest> reqs = {with_tail(21), with_tail(22)};
  const auto cold = run_kept(reqs);
  {  // Roomy pool: A's blocks were published before the window released them, so B adopts all 8 and is exact.
    auto engine = make(config(2, 64, true, true));
    EXPECT_EQ(run_all(*engine, {reqs[0]})[0]->ids, cold[0]);
    const uint64_t hits0 = engine->stats().prefix_hits_tokens;
    EXPECT_EQ(run_all(*engine, {reqs[1]})[0]->ids, cold[1]);
    EXPECT_EQ(engine->stats().prefix_hits_tokens - hits0, 64u);
    expect_idle_books(*engine);
  }
  {  // Tight pool: a filler evicts A's released blocks (least recently released first), which breaks the
     // chain at its start: B adopts nothing there and still gives the uncached output.
    auto engine = make(config(2, 12, true, true));
    EXPECT_EQ(run_all(*engine, {reqs[0]})[0]->ids, cold[0]);
    run_all(*engine, {greedy(ids_of(90, 5), 10)});
    const uint64_t hits0 = engine->stats().prefix_hits_tokens;
    EXPECT_EQ(run_all(*engine, {reqs[1]})[0]->ids, cold[1]);
    const uint64_t hits = engine->stats().prefix_hits_tokens - hits0;
    EXPECT_EQ(hits % kBlockTokens, 0u);
    EXPECT_LT(hits, 64u) << "block 0 was evicted: no chain from the start";
    std::printf("[ window ] prefix after eviction: %llu of 64 shared tokens reused\n",
                static_cast<unsigned long long>(hits));
    expect_idle_books(*engine);
  }
}

// (d) Five sequences of 10 + 100 positions in a 12-block pool: all five are admitted on their 2 prompt
// blocks, and their windows (up to 4 blocks each) then outgrow the pool: preemption, and one cancel mid-way.
TEST_F(EngineWindowTest, CancelAndPreemptUnderReleaseFreeEverythingOnce) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(greedy(ids_of(10, 40 + i), 100));
  const auto kept = run_kept(reqs);
  for (bool prefix : {false, true}) {
    auto engine = make(config(5, 12, true, prefix));
    std::vector<std::shared_ptr<Sink>> sinks;
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto cancel = std::make_shared<CancelToken>();
      auto s = std::make_shared<Sink>(cancel, i == 1 ? 50 : -1);  // #1 cancels after 50 tokens
      ASSERT_TRUE(engine->submit(reqs[i], s, cancel).ok());
      sinks.push_back(s);
    }
    for (auto& s : sinks) ASSERT_TRUE(s->wait(120));
    ASSERT_TRUE(engine->wait_idle(10));
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(sinks[i]->n_finish.load(), 1);
      if (i == 1) {
        EXPECT_GE(sinks[i]->ids.size(), 50u);
        EXPECT_TRUE(std::equal(sinks[i]->ids.begin(), sinks[i]->ids.end(), kept[i].begin()));
      } else {
        EXPECT_EQ(sinks[i]->ids, kept[i]) << "#" << i << " prefix " << prefix;
      }
    }
    EXPECT_GT(engine->stats().n_preemptions, 0u) << "the pool is sized to preempt";
    std::printf("[ window ] 5 x 110 positions in 12 blocks, prefix %s: %llu preemptions\n",
                prefix ? "on" : "off", static_cast<unsigned long long>(engine->stats().n_preemptions));
    expect_idle_books(*engine);
  }
}

}  // namespace
}  // namespace frost
