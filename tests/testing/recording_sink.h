#pragma once
// RecordingSink: a TokenSink that records what one request streamed — its ids (with their logprobs), its
// text, whether it was admitted, how and how often it finished — for tests that drive an Engine. Optionally
// it cancels its request once `cancel_at` ids have arrived, and runs `on_tok` after every event (tests that
// look at the stream while it runs).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/common/cancel.h"
#include "core/generate/engine.h"

namespace frost::testing {

class RecordingSink : public TokenSink {
 public:
  explicit RecordingSink(std::shared_ptr<CancelToken> cancel = nullptr, int cancel_at = -1,
                         std::function<void(const RecordingSink&)> on_tok = nullptr)
      : cancel_(std::move(cancel)), cancel_at_(cancel_at), on_tok_(std::move(on_tok)) {}
  void on_admitted() override { admitted = true; }
  void on_token(const TokenEvent& ev) override {
    if (ev.id >= 0) {
      ids.push_back(ev.id);
      logprobs.push_back(ev.logprob);
    }
    text += ev.text;
    if (on_tok_) on_tok_(*this);
    if (cancel_ && static_cast<int>(ids.size()) == cancel_at_) cancel_->cancel();
  }
  void on_finish(absl::StatusOr<GenerationResult> r) override {
    ++n_finish;
    result = std::move(r);
    done.Notify();
  }
  // Whether the request finished within `seconds`.
  bool wait(double seconds) { return done.WaitForNotificationWithTimeout(absl::Seconds(seconds)); }

  std::atomic<bool> admitted{false};
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::string text;
  std::atomic<int> n_finish{0};
  absl::StatusOr<GenerationResult> result = absl::UnknownError("not finished");
  absl::Notification done;

 private:
  std::shared_ptr<CancelToken> cancel_;
  int cancel_at_;
  std::function<void(const RecordingSink&)> on_tok_;
};

}  // namespace frost::testing
