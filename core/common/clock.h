#pragma once
// Clock interface so deadlines, timings and ETAs can be driven by a fake clock in tests.
#include <atomic>
#include <chrono>
#include <cstdint>

namespace frost {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time in nanoseconds.
  virtual int64_t now_ns() const = 0;
  double now_s() const { return static_cast<double>(now_ns()) * 1e-9; }
};

class RealClock final : public Clock {
 public:
  int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Process-wide instance.
  static const RealClock& get() {
    static const RealClock clock;
    return clock;
  }
};

// Manually advanced clock for tests. Thread-safe.
class FakeClock final : public Clock {
 public:
  int64_t now_ns() const override { return t_ns_.load(); }
  void advance_ns(int64_t d) { t_ns_.fetch_add(d); }
  void set_ns(int64_t t) { t_ns_.store(t); }

 private:
  std::atomic<int64_t> t_ns_{0};
};

}  // namespace frost
