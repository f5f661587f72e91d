#pragma once
// TensorStore: byte accounting of the tensors that served artifacts hold, per device and per artifact.
//
// Each loaded artifact holds a Lease; the bytes are released when the last holder drops it — which is when
// the last request that started on that version finishes (requests hold a shared_ptr to the version they
// started with). Device: where the artifact's consumer computes, by its real name — "cpu", or "cuda:0" when
// the prototype head computes on the GPU (core/prototype/device.h: a model on cuda:N under a LibTorch with
// CUDA). The store's own device (ServerInfo.device, `frostctl server-info`) is set once the served model is
// known (ServedModel::start); a lease may name another.
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
  std::string device() const;
  void set_device(std::string device);
  // Accounts `bytes` on `device` ("" = this store's device) under `name` until the lease is destroyed. The
  // store must outlive its leases.
  std::shared_ptr<Lease> account(const std::string& name, int64_t bytes, const std::string& device = "");
  std::map<std::string, int64_t> bytes_by_device() const;
  // Bytes held for `name` now (0 when not loaded).
  int64_t bytes_of(const std::string& name) const;

 private:
  void release(const Lease& l);
  mutable absl::Mutex mu_;
  std::string device_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> by_device_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> by_name_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost::serving
