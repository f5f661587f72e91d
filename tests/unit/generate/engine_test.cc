// The serving engine on builtin:tiny: interleaved sequences match the single-sequence
// generator, admission control, cancellation, deadlines, KV release and shutdown.
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
    ASSERT_TRUE(engine->submit(request(prompts[i], 30, i % 2 ? 0.8f : 0.f), sink, std::make_shared<CancelToken>()).ok());
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
  EXPECT_EQ(sink->result_->n_completion, 5);  // at most one more token after the cancel
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
  EXPECT_EQ(engine->submit(request("late", 5), std::make_shared<TestSink>(), std::make_shared<CancelToken>()).code(),
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

}  // namespace
}  // namespace frost
