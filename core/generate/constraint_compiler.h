#pragma once
// ConstraintCompiler: structured-output constraints (JSON Schema, regex, GBNF) compiled off the request path.
//
// A constraint is the one part of a request whose cost the client chooses: a small schema can describe a
// large grammar. So compiling never runs on a transport thread (HTTP worker, gRPC callback or intake
// executor) nor on the engine thread. It runs here:
//   - on `threads` compiler threads, with at most `max_queued` compiles waiting (beyond: RESOURCE_EXHAUSTED,
//     "the constraint compiler is busy");
//   - within a budget: a compile that runs longer than `timeout_ms` stops (INVALID_ARGUMENT naming
//     engine.constraint_compile_timeout_ms: the constraint is too expensive), and one that waited in the
//     queue for as long without starting is refused (UNAVAILABLE: the compiler is overloaded, retry);
//     core/constrain's size limits (CompileLimits) usually refuse a hostile constraint long before;
//   - cancellable: when every request waiting for a compile is cancelled (client gone, deadline passed), the
//     compile stops within a few milliseconds (a watcher polls the requests' CancelTokens every kWatchMs);
//     shutdown() stops every compile at once.
// Equal specs share one compile (requests that arrive while it runs wait for the same result), and results
// are cached: successes and deterministic refusals (a syntax error, a limit) alike, so a client that repeats
// a bad constraint pays for it once. The cache is bounded in bytes (`cache_bytes`: the spec's text, the
// compiled grammar and the masks its matchers cached), least recently used first out.
//
// Thread-safe. Completion callbacks run on a compiler thread (or the watcher's, for cancellations) and must
// not block.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/cancel.h"
#include "core/constrain/constraint.h"

namespace frost {

struct ConstraintCompilerOptions {
  int32_t threads = 1;
  int32_t max_queued = 64;
  int64_t timeout_ms = 1000;
  int64_t cache_bytes = int64_t{64} << 20;
  constrain::CompileLimits limits;
};

struct ConstraintCompilerStats {
  uint64_t compiles = 0;         // compiles run to an end (success or refusal)
  uint64_t refused = 0;          // of those, refused (syntax, limits, budget)
  uint64_t timeouts = 0;         // stopped at timeout_ms (counted in refused too)
  uint64_t cancelled = 0;        // stopped because nobody waited any more, or shutdown
  uint64_t queue_full = 0;       // refused at once: max_queued compiles waiting
  uint64_t cache_hits = 0;       // answered from the cache
  uint64_t shared = 0;           // joined a compile of the same spec already under way
  int64_t cache_bytes = 0;       // what the cache holds now
  int64_t cache_entries = 0;
  int32_t running = 0, queued = 0;
  double compile_seconds = 0;    // total wall time of finished compiles
};

class ConstraintCompiler {
 public:
  using Compiled = std::shared_ptr<const constrain::CompiledConstraint>;
  using Result = absl::StatusOr<Compiled>;
  using Done = std::function<void(Result)>;
  static constexpr int kWatchMs = 5;

  explicit ConstraintCompiler(const ConstraintCompilerOptions& opt);
  ~ConstraintCompiler();  // shutdown()
  ConstraintCompiler(const ConstraintCompiler&) = delete;
  ConstraintCompiler& operator=(const ConstraintCompiler&) = delete;

  // The cached outcome for `spec`, or nullopt when it must be compiled.
  std::optional<Result> lookup(const constrain::ConstraintSpec& spec);
  // Compiles `spec` (or joins the compile of an equal spec) and calls `done` exactly once with the outcome,
  // later, on another thread. `cancel` (may be null) is the requester's: when every requester of a compile
  // is cancelled, the compile stops and each gets CANCELLED. Returns non-OK (and never calls `done`) when
  // the compile cannot be queued: RESOURCE_EXHAUSTED when max_queued compiles wait, UNAVAILABLE after
  // shutdown().
  absl::Status compile_async(const constrain::ConstraintSpec& spec, std::shared_ptr<const CancelToken> cancel,
                             Done done);
  // compile_async and wait (tests and tools; never on a request path).
  Result compile(const constrain::ConstraintSpec& spec);
  // Stops every compile (their requesters get CANCELLED), refuses new ones, joins the threads. Idempotent.
  void shutdown();

  ConstraintCompilerStats stats() const;
  const ConstraintCompilerOptions& options() const { return opt_; }

 private:
  struct Waiter {
    std::shared_ptr<const CancelToken> cancel;
    Done done;
  };
  struct Job {
    std::string key;
    constrain::ConstraintSpec spec;
    std::vector<Waiter> waiters;
    std::atomic<bool> stop{false};
    bool started = false;
    int64_t t_queued_ns = 0;
  };
  struct Entry {
    std::string key;
    Result result;
    int64_t fixed_bytes = 0;  // key + grammar (+ error text)
  };

  void work();
  void watch();
  void finish(const std::shared_ptr<Job>& job, Result r);
  static int64_t entry_bytes(const Entry& e);
  void insert_locked(std::string key, Result r);
  void evict_locked();

  const ConstraintCompilerOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;        // compiler threads: work queued, or stop
  std::condition_variable watch_cv_;  // the watcher: stop
  bool stop_ = false;
  std::deque<std::shared_ptr<Job>> queue_;
  std::unordered_map<std::string, std::shared_ptr<Job>> jobs_;  // queued or running, by key
  std::list<Entry> lru_;                                           // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  ConstraintCompilerStats stats_;
  std::vector<std::thread> threads_;
  std::thread watcher_;
};

}  // namespace frost
