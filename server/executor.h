#pragma once
// Executor: a bounded queue and a few named worker threads for work that must not run on a gRPC callback
// thread (docs/conventions.md, "Reactors never block"). Predict's backbone forward runs here; the reactor only
// decodes the request, queues it, and finishes the call from the worker.
//
// submit() never blocks: a full queue is RESOURCE_EXHAUSTED at once (the caller answers the RPC with it),
// and after shutdown() it is UNAVAILABLE. shutdown() stops taking work, runs what is already queued (those
// requests were accepted and finish), and joins the workers.
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace frost::server {

class Executor {
 public:
  // `name` names the threads (pthread names, at most 15 bytes: "<name>-<i>" is cut to fit) and the
  // messages. `init` runs first on every worker thread (e.g. its intra-op thread budget).
  Executor(std::string name, int n_threads, int max_queued, std::function<void()> init = nullptr);
  ~Executor();  // shutdown()
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  absl::Status submit(std::function<void()> task);
  void shutdown();

  int64_t queued() const;   // waiting, not yet started
  int64_t running() const;  // started, not yet finished
  int max_queued() const { return max_queued_; }

 private:
  void worker(int index);

  const std::string name_;
  const int max_queued_;
  std::function<void()> init_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  std::once_flag joined_;
};

}  // namespace frost::server
