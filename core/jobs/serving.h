#pragma once
// Serving side of the artifact registry: the loaded, active artifacts and their device memory.
//
// TensorStore accounts the bytes of every loaded artifact's tensors per device. Each loaded
// artifact holds a Lease; the bytes are released when the last holder drops it — which is when
// the last request that started on that version finishes (requests hold a shared_ptr to the
// ServedPrototype they started with).
//
// Activation is load() then install(): load() verifies an artifact completely (manifest
// checksums, tensor set and shapes, backbone identity) before anything is swapped, so a bad
// artifact is refused with FAILED_PRECONDITION and the active one keeps serving. The swap itself is one
// pointer store under a mutex: a request sees either the old or the new version, never a mix.
//
// Device: the store's tensors live where the Predictor computes, which is the CPU in this build
// (core/prototype runs on CPU); "cuda" is reported only when the predictor runs there.
#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/jobs/artifact_store.h"
#include "core/model/model_loader.h"
#include "core/prototype/predictor.h"

namespace frost::jobs {

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

// One loaded prototype artifact.
struct ServedPrototype {
  std::string name;  // "prototype/3"
  std::shared_ptr<const LoadedModel> model;
  std::unique_ptr<proto::Predictor> predictor;
  std::shared_ptr<TensorStore::Lease> lease;
};

class PrototypeServing {
 public:
  explicit PrototypeServing(TensorStore* store) : store_(store) {}

  // The active version (nullptr = none). Hold the pointer for the whole request.
  std::shared_ptr<const ServedPrototype> current() const;
  // Loads and verifies `a` against `model` without swapping it in. FAILED_PRECONDITION "artifact
  // 'x' cannot be activated: <reason>" for a corrupt, incomplete or mismatched artifact (counted in
  // swap_failures()).
  absl::StatusOr<std::shared_ptr<const ServedPrototype>> load(const ArtifactInfo& a,
                                                              std::shared_ptr<const LoadedModel> model) const;
  // Makes a loaded artifact current (counted in swaps()).
  void install(std::shared_ptr<const ServedPrototype> s);
  void clear();
  int64_t swaps() const { return swaps_.load(); }
  int64_t swap_failures() const { return swap_failures_.load(); }

 private:
  TensorStore* store_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const ServedPrototype> current_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> swaps_{0};
  mutable std::atomic<int64_t> swap_failures_{0};
};

}  // namespace frost::jobs
