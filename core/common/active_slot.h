#pragma once
// ActiveSlot<T>: the artifact a server applies to new work, hot-swappable. Readers take the shared_ptr
// they saw and keep it to their end (a sequence keeps the operator it started with); set() swaps it.
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace frost {

template <typename T>
class ActiveSlot {
 public:
  using Active = T;
  void set(std::shared_ptr<const T> a) {
    absl::MutexLock l(&mu_);
    a_ = std::move(a);
  }
  std::shared_ptr<const T> get() const {
    absl::MutexLock l(&mu_);
    return a_;
  }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const T> a_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost
