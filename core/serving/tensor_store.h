#pragma once
// TensorStore: byte accounting of the tensors that served artifacts hold, per device and per artifact.
//
// Each loaded artifact holds a Lease; the bytes are released when the last holder drops it — which is when
// the last request that started on that version finishes (requests hold a shared_ptr to the version they
// started with). Device: where the artifact's consumer computes — the CPU in this build (core/prototype runs
// on CPU); "cuda" is reported only when it runs there.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"

namespace frost::serving {

class TensorStore {
 public:
  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    const std::string& name() const { return name_; }
    int64_t bytes() const { return bytes_; }

   private:
    friend class TensorStore;
    Lease(TensorStore* store, std::string name, std::string device, int64_t bytes)
        : store_(store), name_(std::move(name)), device_(std::move(device)), bytes_(bytes) {}
    TensorStore* store_;
    std::string name_, device_;
    int64_t bytes_;
  };

  explicit TensorStore(std::string device = "cpu") : device_(std::move(device)) {}
  const std::string& device() const { return device_; }
  // Accounts `bytes` on this store's device under `name` until the lease is destroyed. The store
  // must outlive its leases.
  std::shared_ptr<Lease> account(const std::string& name, int64_t bytes);
  std::map<std::string, int64_t> bytes_by_device() const;
  // Bytes held for `name` now (0 when not loaded).
  int64_t bytes_of(const std::string& name) const;

 private:
  void release(const Lease& l);
  std::string device_;
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> by_device_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> by_name_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost::serving
