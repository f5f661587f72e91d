#include "core/generate/engine_masks.h"

#include <pthread.h>

#include "core/generate/sequence.h"

namespace frost {

MaskFiller::~MaskFiller() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void MaskFiller::start(const std::vector<Sequence*>& seqs) {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  absl::MutexLock lock(&mu_);
  work_.assign(seqs.begin(), seqs.end());
  next_ = 0;
  started_ = ++round_;
  open_ = true;
}

Sequence* MaskFiller::claim(uint64_t round) {
  absl::MutexLock lock(&mu_);
  if (!open_ || round != round_ || next_ >= work_.size()) return nullptr;
  ++in_flight_;
  return work_[next_++];
}

void MaskFiller::done() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void MaskFiller::join() {
  for (Sequence* s; (s = claim(started_)) != nullptr; done()) s->fill_mask();
  absl::MutexLock lock(&mu_);
  open_ = false;  // a filler that wakes late finds nothing to claim
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
}

void MaskFiller::run() {
  pthread_setname_np(pthread_self(), "frost-masks");
  uint64_t seen = 0;
  for (;;) {
    uint64_t round = 0;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, seen]()
                       ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || (open_ && round_ != seen); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      round = seen = round_;
    }
    for (Sequence* s; (s = claim(round)) != nullptr; done()) s->fill_mask();
  }
}

}  // namespace frost
