#include "core/serving/tensor_store.h"

namespace frost::serving {

TensorStore::Lease::~Lease() { store_->release(*this); }

std::shared_ptr<TensorStore::Lease> TensorStore::account(const std::string& name, int64_t bytes) {
  {
    absl::MutexLock l(&mu_);
    by_device_[device_] += bytes;
    by_name_[name] += bytes;
  }
  return std::shared_ptr<Lease>(new Lease(this, name, device_, bytes));
}

void TensorStore::release(const Lease& l) {
  absl::MutexLock lock(&mu_);
  by_device_[l.device_] -= l.bytes_;
  auto it = by_name_.find(l.name_);
  if (it != by_name_.end() && (it->second -= l.bytes_) <= 0) by_name_.erase(it);
}

std::map<std::string, int64_t> TensorStore::bytes_by_device() const {
  absl::MutexLock l(&mu_);
  std::map<std::string, int64_t> out = by_device_;
  out.try_emplace(device_, 0);
  return out;
}

int64_t TensorStore::bytes_of(const std::string& name) const {
  absl::MutexLock l(&mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? 0 : it->second;
}

}  // namespace frost::serving
