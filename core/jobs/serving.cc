#include "core/jobs/serving.h"

#include "absl/strings/str_cat.h"
#include "core/prototype/artifact.h"

namespace frost::jobs {

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

std::shared_ptr<const ServedPrototype> PrototypeServing::current() const {
  absl::MutexLock l(&mu_);
  return current_;
}

absl::StatusOr<std::shared_ptr<const ServedPrototype>> PrototypeServing::load(
    const ArtifactInfo& a, std::shared_ptr<const LoadedModel> model) const {
  auto refuse = [&](const absl::Status& s) {
    swap_failures_.fetch_add(1);
    return absl::FailedPreconditionError(
        absl::StrCat("artifact '", a.name, "' cannot be activated: ", s.message()));
  };
  if (a.kind != "prototype") return refuse(absl::InvalidArgumentError("not a prototype artifact"));
  absl::StatusOr<proto::PrototypeArtifact> art = proto::load_artifact(a.dir);
  if (!art.ok()) return refuse(art.status());
  const int64_t bytes = art->tensor_bytes();
  absl::StatusOr<std::unique_ptr<proto::Predictor>> p = proto::Predictor::create(*std::move(art), *model);
  if (!p.ok()) return refuse(p.status());
  auto s = std::make_shared<ServedPrototype>();
  s->name = a.name;
  s->model = std::move(model);
  s->predictor = *std::move(p);
  s->lease = store_->account(a.name, bytes);
  return std::shared_ptr<const ServedPrototype>(std::move(s));
}

void PrototypeServing::install(std::shared_ptr<const ServedPrototype> s) {
  std::shared_ptr<const ServedPrototype> old;
  {
    absl::MutexLock l(&mu_);
    old = std::move(current_);
    current_ = std::move(s);
  }
  swaps_.fetch_add(1);
  // `old` is released here, or by the last request still holding it.
}

void PrototypeServing::clear() {
  std::shared_ptr<const ServedPrototype> old;
  absl::MutexLock l(&mu_);
  old = std::move(current_);
}

}  // namespace frost::jobs
