#include "core/serving/tensor_store.h"

namespace frost::serving {

TensorStore::Lease::~Lease() { store_->release(*this); }

std::string TensorStore::device() const {
  absl::MutexLock l(&mu_);
  return device_;
}

void TensorStore::set_device(std::string device) {
  absl::MutexLock l(&mu_);
  device_ = std::move(device);
}

std::shared_ptr<TensorStore::Lease> TensorStore::account(const std::string& name, int64_t bytes,
                                                         const std::string& device) {
  std::string on;
  {
    absl::MutexLock l(&mu_);
    on = device.empty() ? device_ : device;
    by_device_[on] += bytes;
    by_name_[name] += bytes;
  }
  return std::shared_ptr<Lease>(new Lease(this, name, std::move(on), bytes));
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
