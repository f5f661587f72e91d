#pragma once
// CancelToken: an atomic flag plus an optional deadline, checked once per decode/train step.
// cancel() may be called from any thread; the worker polls state().
#include <atomic>
#include <cstdint>
#include <limits>

#include "core/common/clock.h"

namespace frost {

class CancelToken {
 public:
  enum class State { kRunning, kCancelled, kDeadlineExceeded };

  explicit CancelToken(const Clock* clock = &RealClock::get()) : clock_(clock) {}

  void cancel() { cancelled_.store(true, std::memory_order_release); }
  // Absolute deadline on this token's clock, in ns. INT64_MAX = none.
  void set_deadline_ns(int64_t t) { deadline_ns_.store(t, std::memory_order_release); }
  // Deadline `seconds` from now.
  void set_timeout_s(double seconds) {
    set_deadline_ns(clock_->now_ns() + static_cast<int64_t>(seconds * 1e9));
  }

  State state() const {
    if (cancelled_.load(std::memory_order_acquire)) return State::kCancelled;
    int64_t d = deadline_ns_.load(std::memory_order_acquire);
    if (d != kNoDeadline && clock_->now_ns() >= d) return State::kDeadlineExceeded;
    return State::kRunning;
  }
  bool stop_requested() const { return state() != State::kRunning; }

 private:
  static constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();
  const Clock* clock_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> deadline_ns_{kNoDeadline};
};

}  // namespace frost
