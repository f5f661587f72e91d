#include "server/executor.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"

namespace frost::server {

Executor::Executor(std::string name, int n_threads, int max_queued, std::function<void()> init)
    : name_(std::move(name)), max_queued_(max_queued), init_(std::move(init)) {
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this, i] { worker(i); });
}

Executor::~Executor() { shutdown(); }

absl::Status Executor::submit(std::function<void()> task) {
  absl::MutexLock l(&mu_);
  if (stopping_) return absl::UnavailableError(absl::StrCat(name_, ": shutting down"));
  if (static_cast<int64_t>(queue_.size()) >= max_queued_)
    return absl::ResourceExhaustedError(
        absl::StrCat(name_, ": ", queue_.size(), " requests already queued (the limit); retry later"));
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

void Executor::shutdown() {
  std::call_once(joined_, [this] {
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    for (std::thread& t : threads_) t.join();
  });
}

int64_t Executor::queued() const {
  absl::MutexLock l(&mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t Executor::running() const {
  absl::MutexLock l(&mu_);
  return running_;
}

void Executor::worker(int index) {
  const std::string thread_name = absl::StrCat(name_, "-", index).substr(0, 15);
  pthread_setname_np(pthread_self(), thread_name.c_str());
  if (init_) init_();
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything accepted has run
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    task();
    absl::MutexLock l(&mu_);
    --running_;
  }
}

}  // namespace frost::server
