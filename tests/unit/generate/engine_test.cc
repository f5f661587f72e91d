// The serving engine on builtin:tiny: interleaved sequences match the single-sequence
// generator, admission control, cancellation, deadlines, KV release and shutdown.
#include "core/model/kv_dims.h"
#include "core/generate/engine.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/synchronization/notification.h"
#include "core/model/model_loader.h"
#include "tests/testing/test_util.h"

namespace frost {
namespace {

// Collects one request's stream. Optionally holds the engine thread at the first token until
// release() — so tests can fill the queue deterministically.
class TestSink : public TokenSink {
 public:
  explicit TestSink(bool hold_first_token = false) : hold_(hold_first_token) {}
  void on_token(const TokenEvent& ev) override {
    if (hold_ && ev.id >= 0 && ids_.empty()) {
      at_first_token_.Notify();
      gate_.WaitForNotification();
    }
    if (ev.id >= 0) ids_.push_back(ev.id);
    text_ += ev.text;
    if (on_event) on_event(ev);
  }
  void on_finish(absl::StatusOr<GenerationResult> r) override {
    ++n_finish_;
    result_ = std::move(r);
    done_.Notify();
  }
  void release() { gate_.Notify(); }
  bool wait(double s = 30) { return done_.WaitForNotificationWithTimeout(absl::Seconds(s)); }

  std::function<void(const TokenEvent&)> on_event;
  absl::Notification at_first_token_;
  std::vector<int32_t> ids_;
  std::string text_;
  std::atomic<int> n_finish_{0};
  absl::StatusOr<GenerationResult> result_ = absl::UnknownError("not finished");

 private:
  bool hold_;
  absl::Notification gate_, done_;
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_model("builtin:tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::shared_ptr<const LoadedModel>(std::move(m).value());
  }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<Engine> make(int32_t running, int32_t waiting) {
    EngineConfig cfg;
    cfg.max_running = running;
    cfg.max_waiting = waiting;
    auto e = Engine::create(model_, cfg);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(e).value();
  }
  static GenerationRequest request(const std::string& prompt, int32_t n, float temperature = 0) {
    GenerationRequest r;
    r.prompt = prompt;
    r.params.max_new_tokens = n;
    r.params.temperature = temperature;
    r.params.seed = 7;
    r.params.ignore_eos = true;
    return r;
  }
  static std::shared_ptr<const LoadedModel> model_;
};
std::shared_ptr<const LoadedModel> EngineTest::model_;

TEST_F(EngineTest, InterleavedSequencesMatchTheSingleSequenceGenerator) {
  auto engine = make(/*running=*/3, /*waiting=*/8);
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Ben", "Zoo", "ab",
                                            "hello world"};
  std::vector<std::shared_ptr<TestSink>> sinks;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto sink = std::make_shared<TestSink>();
    ASSERT_TRUE(
        engine->submit(request(prompts[i], 30, i % 2 ? 0.8f : 0.f), sink, std::make_shared<CancelToken>())
            .ok());
    sinks.push_back(sink);
  }
  Generator gen(*model_, GeneratorConfig{});
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(sinks[i]->wait());
    ASSERT_TRUE(sinks[i]->result_.ok()) << sinks[i]->result_.status();
    CancelToken c;
    auto want = gen.generate(request(prompts[i], 30, i % 2 ? 0.8f : 0.f), nullptr, c);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(sinks[i]->result_->ids, want->ids) << prompts[i];
    EXPECT_EQ(sinks[i]->ids_, want->ids);
    EXPECT_EQ(sinks[i]->text_, want->text);
    EXPECT_EQ(sinks[i]->n_finish_.load(), 1);
  }
  EXPECT_TRUE(engine->wait_idle(5));
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.n_running, 0);
  EXPECT_EQ(s.kv_bytes_in_use, 0);
  EXPECT_EQ(s.n_finished, prompts.size());
}

TEST_F(EngineTest, RejectsBeyondRunningPlusWaitingAtOnce) {
  auto engine = make(/*running=*/2, /*waiting=*/3);
  // Hold the engine thread inside the first request's first token: nothing can finish.
  auto first = std::make_shared<TestSink>(/*hold_first_token=*/true);
  ASSERT_TRUE(engine->submit(request("hold", 50), first, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(first->at_first_token_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  std::vector<std::shared_ptr<TestSink>> sinks;
  int ok = 0, exhausted = 0;
  for (int i = 0; i < 9; ++i) {
    auto sink = std::make_shared<TestSink>();
    absl::Status st = engine->submit(request("x", 5), sink, std::make_shared<CancelToken>());
    if (st.ok()) {
      ++ok;
      sinks.push_back(sink);
    } else {
      EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
      ++exhausted;
    }
  }
  // Limit 2 running + 3 waiting = 5 in flight: the held request + 4 queued; 5 of 9 rejected.
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(exhausted, 5);
  EXPECT_EQ(engine->stats().n_rejected_full, 5u);
  first->release();
  ASSERT_TRUE(first->wait());
  for (auto& s : sinks) {
    ASSERT_TRUE(s->wait());
    EXPECT_TRUE(s->result_.ok());
  }
}

TEST_F(EngineTest, CancelMidStreamReleasesKvAtOnce) {
  auto engine = make(2, 2);
  auto cancel = std::make_shared<CancelToken>();
  auto sink = std::make_shared<TestSink>();
  sink->on_event = [&](const TokenEvent& ev) {
    if (ev.index == 4) cancel->cancel();
  };
  ASSERT_TRUE(engine->submit(request("Once upon a time", 400), sink, cancel).ok());
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(sink->result_.ok());
  EXPECT_EQ(sink->result_->finish_reason, FinishReason::kCancelled);
  // Streams are delivered off the engine thread, which may be a round ahead of the client; after cancel()
  // the engine computes at most one more round.
  EXPECT_GE(sink->result_->n_completion, 5);
  EXPECT_LE(sink->result_->n_completion, 8);
  EXPECT_EQ(static_cast<int>(sink->ids_.size()), sink->result_->n_completion);
  EXPECT_TRUE(engine->wait_idle(5));
  EXPECT_EQ(engine->stats().kv_bytes_in_use, 0);
}

TEST_F(EngineTest, DeadlineEndsTheStream) {
  auto engine = make(1, 1);
  auto cancel = std::make_shared<CancelToken>();
  cancel->set_timeout_s(0.0);  // already past
  auto sink = std::make_shared<TestSink>();
  ASSERT_TRUE(engine->submit(request("Once", 100), sink, cancel).ok());
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(sink->result_.ok());
  EXPECT_EQ(sink->result_->finish_reason, FinishReason::kDeadline);
  EXPECT_EQ(sink->result_->n_completion, 0);
}

TEST_F(EngineTest, InvalidRequestsFailAtSubmitWithoutModelWork) {
  auto engine = make(1, 1);
  auto sink = std::make_shared<TestSink>();
  auto req = request("", 5);
  absl::Status st = engine->submit(req, sink, std::make_shared<CancelToken>());
  EXPECT_INVALID(st, "prompt");
  req = request("hi", 5);
  req.params.temperature = -1;
  EXPECT_INVALID(engine->submit(req, sink, std::make_shared<CancelToken>()), "temperature");
  EXPECT_EQ(sink->n_finish_.load(), 0);
  EXPECT_EQ(engine->stats().n_accepted, 0u);
}

TEST_F(EngineTest, DrainThenShutdownCancelsWhatIsLeftExactlyOnce) {
  auto engine = make(1, 4);
  auto first = std::make_shared<TestSink>(/*hold_first_token=*/true);
  ASSERT_TRUE(engine->submit(request("hold", 300), first, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(first->at_first_token_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  auto queued = std::make_shared<TestSink>();
  ASSERT_TRUE(engine->submit(request("queued", 5), queued, std::make_shared<CancelToken>()).ok());
  engine->stop_accepting();
  EXPECT_EQ(engine->submit(request("late", 5), std::make_shared<TestSink>(), std::make_shared<CancelToken>())
                .code(),
            absl::StatusCode::kUnavailable);
  std::thread stopper([&] { engine->shutdown(); });
  first->release();
  stopper.join();
  ASSERT_TRUE(first->wait(5) && queued->wait(5));
  EXPECT_EQ(first->n_finish_.load(), 1);
  EXPECT_EQ(queued->n_finish_.load(), 1);
  ASSERT_TRUE(first->result_.ok());
  EXPECT_EQ(first->result_->finish_reason, FinishReason::kCancelled);
  EXPECT_LT(first->result_->n_completion, 300);
}

// ---- kvsplice: the KvSpliceSlot a server fills (kvsplice artifacts, engine.kv_splice)

class EngineKvSpliceTest : public EngineTest {
 protected:
  static std::shared_ptr<const KvSpliceSlot::Active> active(const std::string& name, int64_t rank,
                                                            uint64_t seed) {
    auto set = KvSpliceSet::create(kvsplice_dims(model_->config), rank, seed);
    EXPECT_TRUE(set.ok()) << set.status();
    auto a = std::make_shared<KvSpliceSlot::Active>();
    a->set = *set;
    a->name = name;
    return a;
  }
  static std::unique_ptr<Engine> make_with(KvSpliceSlot* slot, KvCodecKind codec = KvCodecKind::kF32,
                                           RepairSlot* repair = nullptr) {
    EngineConfig cfg;
    cfg.max_running = 2;
    cfg.max_waiting = 4;
    cfg.gen.kv_codec = codec;
    cfg.kv_splice = slot;
    cfg.kv_repair = repair;
    auto e = Engine::create(model_, cfg);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(e).value();
  }
  static GenerationRequest splice_request(const std::string& prompt, int32_t n) {
    GenerationRequest r = request(prompt, n);
    r.kv_codec = KvCodecKind::kKvSplice;
    return r;
  }
  static int64_t full_rank() { return model_->config.n_head_kv * model_->config.head_dim; }
};

TEST_F(EngineKvSpliceTest, RefusedAtSubmitWithoutAnActiveSplice) {
  KvSpliceSlot empty;
  for (KvSpliceSlot* slot : {static_cast<KvSpliceSlot*>(nullptr), &empty}) {
    auto engine = make_with(slot);
    auto sink = std::make_shared<TestSink>();
    absl::Status st = engine->submit(splice_request("Once", 4), sink, std::make_shared<CancelToken>());
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(std::string(st.message()).find("kv.codec: kvsplice but no KVSplice is active"),
              std::string::npos)
        << st;
    EXPECT_EQ(sink->n_finish_.load(), 0);  // nothing was started
    EXPECT_EQ(engine->stats().n_accepted, 0u);
    // other codecs are unaffected
    auto ok = std::make_shared<TestSink>();
    ASSERT_TRUE(engine->submit(request("Once", 3), ok, std::make_shared<CancelToken>()).ok());
    ASSERT_TRUE(ok->wait());
    ASSERT_TRUE(ok->result_.ok()) << ok->result_.status();
    EXPECT_EQ(ok->result_->kv_splice, "");
    EXPECT_EQ(engine->stats().kv_splice_active, "");
  }
}

TEST_F(EngineKvSpliceTest, ServesWithTheActiveSetAndASequenceKeepsItsSetAcrossASwap) {
  KvSpliceSlot slot;
  slot.set(active("kvsplice/1", full_rank(), 1));
  auto engine = make_with(&slot);
  EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_splice_active, "kvsplice/1");
  EXPECT_EQ(s.kv_splice_rank, std::to_string(full_rank()));
  EXPECT_GT(s.kv_bytes_per_token, 0);  // fp32 default: unaffected by the splice

  // Held at its first token while the slot swaps to kvsplice/2: it finishes on kvsplice/1.
  auto held = std::make_shared<TestSink>(/*hold_first_token=*/true);
  ASSERT_TRUE(
      engine->submit(splice_request("Once upon a time", 8), held, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(held->at_first_token_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  slot.set(active("kvsplice/2", 4, 2));
  held->release();
  ASSERT_TRUE(held->wait());
  ASSERT_TRUE(held->result_.ok()) << held->result_.status();
  EXPECT_EQ(held->result_->kv_codec, "kvsplice");
  EXPECT_EQ(held->result_->kv_splice, "kvsplice/1");
  EXPECT_EQ(held->result_->n_completion, 8);

  auto next = std::make_shared<TestSink>();
  ASSERT_TRUE(
      engine->submit(splice_request("Once upon a time", 5), next, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(next->wait());
  ASSERT_TRUE(next->result_.ok()) << next->result_.status();
  EXPECT_EQ(next->result_->kv_splice, "kvsplice/2");
  EXPECT_EQ(next->result_->n_completion, 5);

  auto plain = std::make_shared<TestSink>();
  ASSERT_TRUE(engine->submit(request("Once", 3), plain, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(plain->wait());
  ASSERT_TRUE(plain->result_.ok());
  EXPECT_EQ(plain->result_->kv_codec, "fp32");
  EXPECT_EQ(plain->result_->kv_splice, "");

  EXPECT_TRUE(engine->wait_idle(5));
  s = engine->stats();
  EXPECT_EQ(s.n_spliced, 2u);
  EXPECT_EQ(s.finished_by_codec["kvsplice"], 2u);
  EXPECT_EQ(s.kv_splice_active, "kvsplice/2");
  EXPECT_EQ(s.kv_splice_rank, "4");
  EXPECT_EQ(s.kv_bytes_in_use, 0);
}

TEST_F(EngineKvSpliceTest, FullRankSpliceFollowsTheFp16CacheGreedily) {
  // An untrained full-rank splice is an orthonormal rotation (σ = 1, b = 0): the latents hold the whole
  // row in fp16, so greedy decoding stays close to the fp16 cache (same first tokens).
  KvSpliceSlot slot;
  slot.set(active("file:full", full_rank(), 3));
  auto engine = make_with(&slot);
  auto run = [&](std::optional<KvCodecKind> codec) {
    auto sink = std::make_shared<TestSink>();
    GenerationRequest r = request("Once upon a time", 6);
    r.kv_codec = codec;
    EXPECT_TRUE(engine->submit(r, sink, std::make_shared<CancelToken>()).ok());
    EXPECT_TRUE(sink->wait());
    return sink->ids_;
  };
  const std::vector<int32_t> fp16 = run(KvCodecKind::kF16), spliced = run(KvCodecKind::kKvSplice);
  ASSERT_EQ(spliced.size(), 6u);
  EXPECT_EQ(std::vector<int32_t>(spliced.begin(), spliced.begin() + 3),
            std::vector<int32_t>(fp16.begin(), fp16.begin() + 3));
}

TEST_F(EngineKvSpliceTest, DefaultCodecKvSpliceBytesFollowTheActiveSet) {
  KvSpliceSlot slot;
  auto engine = make_with(&slot, KvCodecKind::kKvSplice);  // no set yet: create() must not allocate a cache
  EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_codec, "kvsplice");
  EXPECT_EQ(s.kv_bytes_per_token, 0);
  auto sink = std::make_shared<TestSink>();
  EXPECT_EQ(engine->submit(request("Once", 3), sink, std::make_shared<CancelToken>()).code(),
            absl::StatusCode::kFailedPrecondition);  // the default codec needs one too
  std::shared_ptr<const KvSpliceSlot::Active> a = active("kvsplice/7", 4, 4);
  slot.set(a);
  s = engine->stats();
  EXPECT_EQ(s.kv_bytes_per_token, a->set->bytes_per_token());
  EXPECT_EQ(s.kv_bytes_per_token, model_->config.n_layer * 2 * 4 * 2);
  ASSERT_TRUE(engine->submit(request("Once", 3), sink, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(sink->result_.ok()) << sink->result_.status();
  EXPECT_EQ(sink->result_->kv_codec, "kvsplice");
  EXPECT_EQ(sink->result_->kv_splice, "kvsplice/7");
}

TEST_F(EngineKvSpliceTest, ARepairOperatorForAnotherCodecNeverTouchesKvSpliceSequences) {
  RepairConfig rc;
  rc.rank = 2;
  auto rs = RepairSet::create(rc, {0}, repair_dims(model_->config), 0);
  ASSERT_TRUE(rs.ok()) << rs.status();
  RepairSlot repair;
  auto ra = std::make_shared<RepairSlot::Active>();
  ra->set = *rs;
  ra->name = "kv_repair/1";
  ra->codec = KvCodecKind::kInt4;
  repair.set(ra);
  KvSpliceSlot slot;
  slot.set(active("kvsplice/1", 4, 5));
  auto engine = make_with(&slot, KvCodecKind::kF32, &repair);
  auto sink = std::make_shared<TestSink>();
  ASSERT_TRUE(engine->submit(splice_request("Once", 3), sink, std::make_shared<CancelToken>()).ok());
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(sink->result_.ok()) << sink->result_.status();
  EXPECT_EQ(sink->result_->kv_repair, "");
  EXPECT_EQ(sink->result_->kv_splice, "kvsplice/1");
  GenerationRequest on = splice_request("Once", 3);
  on.kv_repair = GenerationRequest::KvRepair::kOn;
  absl::Status st = engine->submit(on, std::make_shared<TestSink>(), std::make_shared<CancelToken>());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(std::string(st.message()).find("kvsplice"), std::string::npos) << st;
}

}  // namespace
}  // namespace frost
