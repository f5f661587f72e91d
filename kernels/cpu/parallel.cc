#include "kernels/cpu/parallel.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace frost::kernels::team {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

thread_local bool t_in_region = false;

// Spinning threads (idle workers, a caller waiting for the workers that joined its region) yield the core
// every kYieldEvery pauses (a few µs): when frostd's gRPC, delivery or client threads are runnable on the
// same core — two cores, more runnable threads — they run at once instead of after the spinner's time slice,
// and a descheduled worker gets back the core the caller spins on. With nothing else runnable the yield
// returns at once.
constexpr uint32_t kYieldEvery = 256;

// One caller at a time (busy_); workers persist. A region is one generation g: the caller publishes body_,
// ctx_, n_ and an open ticket for g, bumps gen_, runs t = 0, then closes the ticket and waits only for the
// workers that joined before it closed (done_). A worker joins by counting itself into the ticket while it is
// open and for its own generation; one that arrives late — descheduled by gRPC or the client, still parked —
// skips the region instead of holding the caller up, since the caller has claimed every task itself. Nothing
// of a region is read after run() returns: only joined workers read it, and they are waited for.
// An idle worker spins kSpinUs, then parks on cv_.
class Team {
 public:
  bool run(int64_t n, void (*body)(void*, int64_t), void* ctx) {
    if (n < 2 || t_in_region) return false;
    bool expected = false;
    if (!busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) return false;
    grow(n - 1);
    body_ = body;
    ctx_ = ctx;
    n_ = n;
    error_ = nullptr;
    park_.store(false, std::memory_order_relaxed);
    const uint64_t g = gen_.load(std::memory_order_relaxed) + 1;
    done_.store(0, std::memory_order_relaxed);
    ticket_.store((g & kGenMask) << kGenShift, std::memory_order_relaxed);
    gen_.store(g, std::memory_order_seq_cst);  // publishes the region
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
    t_in_region = true;
    try {
      body(ctx, 0);
    } catch (...) {
      record(std::current_exception());
    }
    t_in_region = false;
    const uint64_t joined = ticket_.fetch_or(kClosed, std::memory_order_acq_rel) & kJoinedMask;
    for (uint32_t k = 1; static_cast<uint64_t>(done_.load(std::memory_order_acquire)) < joined; ++k) {
      cpu_relax();
      if (k % kYieldEvery == 0) std::this_thread::yield();  // a descheduled worker may need this core
    }
    std::exception_ptr error = error_;
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);  // as at::parallel_for does: the first one, in the caller
    return true;
  }

  int64_t workers() const { return n_workers_; }
  void park() { park_.store(true, std::memory_order_relaxed); }

 private:
  // Starts workers up to `k` (under busy_).
  void grow(int64_t k) {
    for (; n_workers_ < k; ++n_workers_) {
      const int64_t t = n_workers_ + 1;
      const uint64_t seen = gen_.load(std::memory_order_relaxed);
      std::thread([this, t, seen] { loop(t, seen); }).detach();  // lives as long as the process
    }
  }

  void record(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!error_) error_ = std::move(e);
  }

  void loop(int64_t t, uint64_t seen) {
    const std::string name = "frost-team-" + std::to_string(t);
    pthread_setname_np(pthread_self(), name.c_str());
    t_in_region = true;  // nested parallel_tasks on a worker run serially
    for (;;) {
      seen = wait(seen);
      if (!join(seen)) continue;  // closed already, or a later region began: not ours to run
      if (t < n_) {
        try {
          body_(ctx_, t);
        } catch (...) {
          record(std::current_exception());
        }
      }
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  // Counts this worker into region g while its ticket is open; false when it has closed or moved on.
  bool join(uint64_t g) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
      if ((t >> kGenShift) != (g & kGenMask) || (t & kClosed)) return false;
      if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        return true;
    }
  }

  // Returns the next generation after `seen`: spinning first, then parked.
  uint64_t wait(uint64_t seen) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point spin_until = Clock::now() + std::chrono::microseconds(kSpinUs);
    uint64_t g;
    for (uint32_t k = 1; (g = gen_.load(std::memory_order_acquire)) == seen; ++k) {
      cpu_relax();
      if (k % kYieldEvery == 0) std::this_thread::yield();  // runnable threads on this core go first
      if ((k % 64 == 0 && park_.load(std::memory_order_relaxed)) ||
          (k % 256 == 0 && Clock::now() > spin_until)) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        cv_.wait(lock, [&] { return gen_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      }
    }
    return g;
  }

  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> gen_{0};
  // ticket_: the region's generation (low 32 bits of it) << 32 | kClosed | workers joined.
  static constexpr int kGenShift = 32;
  static constexpr uint64_t kGenMask = 0xffffffffu;
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kJoinedMask = kClosed - 1;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> done_{0};  // joined workers finished with the region
  std::atomic<int64_t> sleepers_{0};
  std::atomic<bool> park_{false};  // the last caller expects no region soon: stop spinning
  int64_t n_workers_ = 0;          // under busy_
  // The region in flight: written by the caller before gen_ moves, read by workers after.
  void (*body_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  std::mutex mu_;  // parking
  std::condition_variable cv_;
  std::mutex error_mu_;
  std::exception_ptr error_;
};

// Never destroyed: workers may still be parked when static destructors run. A forked child has none of the
// parent's threads, so it starts a new team (gtest death tests, daemons).
Team* g_team = nullptr;
std::once_flag g_once;

Team& the_team() {
  std::call_once(g_once, [] {
    g_team = new Team();
    pthread_atfork(nullptr, nullptr, [] {
      g_team = new Team();
      t_in_region = false;
    });
  });
  return *g_team;
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FROST_PARALLEL_TEAM");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

bool run(int64_t n_threads, void (*body)(void*, int64_t), void* ctx) {
  if (!enabled()) return false;
  return the_team().run(n_threads, body, ctx);
}

bool in_region() { return t_in_region; }

void park() {
  if (enabled()) the_team().park();
}

int64_t workers() { return the_team().workers(); }

}  // namespace frost::kernels::team
