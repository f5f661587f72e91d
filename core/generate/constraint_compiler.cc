#include "core/generate/constraint_compiler.h"

#include <malloc.h>
#include <pthread.h>

#include <future>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/common/clock.h"
#include "core/common/field_error.h"
#include "core/common/log.h"

namespace frost {
namespace {

std::string spec_key(const constrain::ConstraintSpec& spec) {
  return absl::StrCat(static_cast<int>(spec.kind), ":", spec.text);
}

int64_t now_ns() { return RealClock::get().now_ns(); }

// A refused compile that freed a large grammar leaves glibc's arenas holding the pages; give back what is
// free above this much so that a storm of big refused constraints does not raise the resident size for good.
constexpr int64_t kTrimAfterBytes = int64_t{4} << 20;

}  // namespace

ConstraintCompiler::ConstraintCompiler(const ConstraintCompilerOptions& opt) : opt_(opt) {
  const int n = std::max(1, opt_.threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  watcher_ = std::thread([this] { watch(); });
}

ConstraintCompiler::~ConstraintCompiler() { shutdown(); }

int64_t ConstraintCompiler::entry_bytes(const Entry& e) {
  int64_t b = e.fixed_bytes;
  if (e.result.ok()) b += static_cast<int64_t>((*e.result)->cached_mask_bytes());
  return b;
}

void ConstraintCompiler::evict_locked() {
  int64_t total = 0;
  for (const Entry& e : lru_) total += entry_bytes(e);
  while (total > opt_.cache_bytes && !lru_.empty()) {
    total -= entry_bytes(lru_.back());
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  stats_.cache_bytes = total;
  stats_.cache_entries = static_cast<int64_t>(lru_.size());
}

void ConstraintCompiler::insert_locked(std::string key, Result r) {
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  Entry e;
  e.fixed_bytes = static_cast<int64_t>(2 * key.size() + 64);  // the key, in the list and the index
  e.fixed_bytes += r.ok() ? static_cast<int64_t>((*r)->memory_bytes()) : static_cast<int64_t>(r.status().message().size());
  e.key = key;
  e.result = std::move(r);
  if (e.fixed_bytes > opt_.cache_bytes) return;  // would evict everything else: not kept
  lru_.push_front(std::move(e));
  index_.emplace(std::move(key), lru_.begin());
  evict_locked();
}

std::optional<ConstraintCompiler::Result> ConstraintCompiler::lookup(const constrain::ConstraintSpec& spec) {
  const std::string key = spec_key(spec);
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++stats_.cache_hits;
  return it->second->result;
}

absl::Status ConstraintCompiler::compile_async(const constrain::ConstraintSpec& spec,
                                               std::shared_ptr<const CancelToken> cancel, Done done) {
  std::string key = spec_key(spec);
  std::optional<Result> hit;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return absl::UnavailableError("the constraint compiler is shutting down");
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.cache_hits;
      hit = it->second->result;
    } else if (auto j = jobs_.find(key); j != jobs_.end()) {
      ++stats_.shared;
      j->second->waiters.push_back({std::move(cancel), std::move(done)});
      return absl::OkStatus();
    } else {
      if (static_cast<int64_t>(queue_.size()) >= opt_.max_queued) {
        ++stats_.queue_full;
        return absl::ResourceExhaustedError(absl::StrCat(
            "the constraint compiler is busy: ", queue_.size(), " compiles are waiting (engine.constraint_compile_queue = ",
            opt_.max_queued, ")"));
      }
      auto job = std::make_shared<Job>();
      job->key = key;
      job->spec = spec;
      job->t_queued_ns = now_ns();
      job->waiters.push_back({std::move(cancel), std::move(done)});
      jobs_.emplace(std::move(key), job);
      queue_.push_back(std::move(job));
      stats_.queued = static_cast<int32_t>(queue_.size());
    }
  }
  if (hit) {
    done(*std::move(hit));  // on the caller's thread: a cached outcome costs nothing to hand over
    return absl::OkStatus();
  }
  cv_.notify_one();
  return absl::OkStatus();
}

ConstraintCompiler::Result ConstraintCompiler::compile(const constrain::ConstraintSpec& spec) {
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> f = promise->get_future();
  absl::Status st = compile_async(spec, nullptr, [promise](Result r) { promise->set_value(std::move(r)); });
  if (!st.ok()) return st;
  return f.get();
}

void ConstraintCompiler::finish(const std::shared_ptr<Job>& job, Result r) {
  std::vector<Waiter> waiters;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(job->key);
    if (it != jobs_.end() && it->second == job) jobs_.erase(it);
    waiters.swap(job->waiters);
  }
  for (Waiter& w : waiters) w.done(r);
}

void ConstraintCompiler::work() {
  pthread_setname_np(pthread_self(), "frost-compile");
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      job->started = true;
      stats_.queued = static_cast<int32_t>(queue_.size());
      ++stats_.running;
    }
    const int64_t t0 = now_ns();
    const int64_t waited_ms = (t0 - job->t_queued_ns) / 1000000;
    Result r;
    bool cache = false, timed_out = false;
    if (job->stop.load()) {
      r = prefix_field(absl::CancelledError("compile cancelled"), "constraint");
    } else if (waited_ms >= opt_.timeout_ms) {
      r = prefix_field(absl::UnavailableError(absl::StrCat(
                           "the compiler is overloaded: the compile waited ", waited_ms,
                           " ms without starting (engine.constraint_compile_timeout_ms = ", opt_.timeout_ms,
                           "); retry later")),
                       "constraint");
    } else {
      constrain::CompileControl control;
      control.deadline = absl::Now() + absl::Milliseconds(opt_.timeout_ms);
      control.cancelled = &job->stop;
      r = constrain::compile_constraint(job->spec, opt_.limits, control);
      if (!r.ok() && absl::IsDeadlineExceeded(r.status())) {
        timed_out = true;
        r = absl::InvalidArgumentError(absl::StrCat(
            r.status().message(), ": the constraint takes longer than engine.constraint_compile_timeout_ms = ",
            opt_.timeout_ms, " ms to compile; simplify it"));
      }
      // Refusals of the text itself are as cacheable as successes; a cancellation is not. A budget refusal
      // depends on the load a little, but the same text would take as long again: cached as well.
      cache = r.ok() || !absl::IsCancelled(r.status());
    }
    const double seconds = static_cast<double>(now_ns() - t0) * 1e-9;
    int64_t grammar_bytes = r.ok() ? static_cast<int64_t>((*r)->memory_bytes()) : 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      --stats_.running;
      if (!r.ok() && absl::IsCancelled(r.status())) {
        ++stats_.cancelled;
      } else if (!(r.ok() || absl::IsInvalidArgument(r.status()))) {
        // overloaded (never started): neither a compile nor a refusal of the text
      } else {
        ++stats_.compiles;
        stats_.compile_seconds += seconds;
        if (!r.ok()) ++stats_.refused;
        if (timed_out) ++stats_.timeouts;
      }
      if (cache && !stop_) insert_locked(job->key, r);
    }
    if (!r.ok()) {
      FROST_LOG_DEBUG("constraint compile refused after %.3f s: %s", seconds, std::string(r.status().message()).c_str());
    }
    finish(job, std::move(r));
    // Whatever a big compile allocated and freed is given back (a refused one keeps nothing).
    if (seconds > 0.05 || grammar_bytes > kTrimAfterBytes) malloc_trim(0);
  }
}

void ConstraintCompiler::watch() {
  pthread_setname_np(pthread_self(), "frost-compile-w");
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    watch_cv_.wait_for(l, std::chrono::milliseconds(kWatchMs));
    if (stop_) break;
    // Requesters that gave up get CANCELLED now; a compile nobody waits for any more stops.
    std::vector<Waiter> gone;
    std::vector<std::shared_ptr<Job>> dropped;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      Job& job = *it->second;
      auto& ws = job.waiters;
      for (size_t i = 0; i < ws.size();) {
        if (ws[i].cancel && ws[i].cancel->stop_requested()) {
          gone.push_back(std::move(ws[i]));
          ws.erase(ws.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
      if (ws.empty()) {
        job.stop.store(true);
        if (!job.started) {  // still queued: leave the queue at once
          dropped.push_back(it->second);
          it = jobs_.erase(it);
          continue;
        }
      }
      ++it;
    }
    if (!dropped.empty()) {
      for (const auto& j : dropped) {
        for (auto q = queue_.begin(); q != queue_.end(); ++q) {
          if (*q == j) {
            queue_.erase(q);
            break;
          }
        }
        ++stats_.cancelled;
      }
      stats_.queued = static_cast<int32_t>(queue_.size());
    }
    if (gone.empty()) continue;
    l.unlock();
    for (Waiter& w : gone)
      w.done(
          prefix_field(absl::CancelledError("compile cancelled: the request was cancelled"), "constraint"));
    l.lock();
  }
}

void ConstraintCompiler::shutdown() {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_ && threads_.empty()) return;
    stop_ = true;
    for (auto& [key, job] : jobs_) {
      job->stop.store(true);
      jobs.push_back(job);
    }
  }
  cv_.notify_all();
  watch_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  if (watcher_.joinable()) watcher_.join();
  // Running compiles ended (their threads joined after finishing them); what is left was queued.
  for (const auto& job : jobs) {
    std::vector<Waiter> waiters;
    {
      std::lock_guard<std::mutex> l(mu_);
      waiters.swap(job->waiters);
      jobs_.erase(job->key);
    }
    for (Waiter& w : waiters)
      w.done(
          prefix_field(absl::CancelledError("compile cancelled: the server is shutting down"), "constraint"));
  }
  std::lock_guard<std::mutex> l(mu_);
  queue_.clear();
}

ConstraintCompilerStats ConstraintCompiler::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  ConstraintCompilerStats s = stats_;
  int64_t total = 0;
  for (const Entry& e : lru_) total += entry_bytes(e);
  s.cache_bytes = total;
  s.cache_entries = static_cast<int64_t>(lru_.size());
  return s;
}

}  // namespace frost
