#pragma once
// Registry: the one owner of what frostd serves — the active prototype head (Predict), KV repair operator
// and KVSplice (Generate) — beside the model they belong to. The server translates RPCs into its calls;
// the engine and Predict take their snapshot from its slots (a request keeps the version it started with);
// training jobs with activate=true call activate(name) from the scheduler (core/jobs sits above serving).
//
// Activation (activate()): find the artifact, verify and load it completely, persist it as the kind's
// active artifact (<state_dir>/artifacts/<kind>/ACTIVE), then swap it in with one pointer store. A corrupt,
// incomplete or mismatched artifact is FAILED_PRECONDITION naming why, and the active one keeps serving.
// One activation at a time. restore() re-activates the persisted ones at start.
//
// The kinds are one file each (core/serving/*_kind.cc, the ServedKind interface in served_kind.h).
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/serving/artifact_store.h"
#include "core/serving/kv_repair_kind.h"
#include "core/serving/kvsplice_kind.h"
#include "core/serving/prototype_kind.h"
#include "core/serving/served_kind.h"
#include "core/serving/tensor_store.h"

namespace frost::serving {

class Registry {
 public:
  // `store`: the artifact store (nullptr when artifacts are disabled: activate() is FAILED_PRECONDITION, and
  // only files named by the config can be served). `tensors` accounts the loaded artifacts' bytes; both must
  // outlive the registry.
  Registry(ArtifactStore* store, TensorStore* tensors);

  // Kinds served by this build ("kvsplice", "kv_repair", "prototype").
  std::vector<std::string> kinds() const;
  // The slots Generate and Predict take their snapshot from: one typed accessor per kind, so a wrong kind or
  // type does not compile (a request keeps the version it took from the slot).
  PrototypeSlot& prototype() { return prototype_->slot(); }  // Predict
  RepairSlot& kv_repair() { return kv_repair_->slot(); }     // EngineConfig::kv_repair
  KvSpliceSlot& kvsplice() { return kvsplice_->slot(); }     // EngineConfig::kv_splice

  // The served model (set once it is loaded: activate(name) serves artifacts for it).
  void set_model(std::shared_ptr<const LoadedModel> model);
  std::shared_ptr<const LoadedModel> model() const;

  // activate(name, model()): UNAVAILABLE while no model is set.
  absl::StatusOr<ArtifactInfo> activate(const std::string& name) { return activate(name, model()); }
  // Activates artifact `name` ("<kind>/<version>") for `model`. INVALID_ARGUMENT for a malformed name,
  // NOT_FOUND for an unknown one, FAILED_PRECONDITION when it cannot be served (nothing changed then).
  absl::StatusOr<ArtifactInfo> activate(const std::string& name,
                                        const std::shared_ptr<const LoadedModel>& model);
  // At start: activates every kind's persisted active artifact. One that cannot be served is logged and
  // its kind serves nothing until an activation. Returns the kinds that now serve an artifact.
  std::set<std::string> restore(const std::shared_ptr<const LoadedModel>& model);
  // Follower mode (an inference replica reading a trainer's store read-only): for every kind whose ACTIVE
  // marker names another version than the one served, loads and swaps that version in (nothing is written).
  // A version that cannot be served is logged and counted once and the served one stays; it is retried only
  // when the marker changes, or while its files are not visible yet (NOT_FOUND: a shared volume can show
  // ACTIVE before the directory). A marker that is removed or emptied leaves the served version in place.
  // Returns the kinds swapped by this call.
  std::set<std::string> follow(const std::shared_ptr<const LoadedModel>& model);
  // Serves a file named by the config for `kind` (engine.kv_repair, engine.kv_splice): INVALID_ARGUMENT
  // prefixed with `field` when it cannot.
  absl::Status serve_file(const std::string& kind, const std::string& field, const std::string& path,
                          const std::shared_ptr<const LoadedModel>& model);

  // Names of the active versions, by kind.
  std::vector<std::string> active_names() const;
  bool is_active(const std::string& name) const;
  // "" when `kind` serves nothing.
  std::string active_name(const std::string& kind) const;
  std::string describe(const std::string& kind) const;

  int64_t swaps() const;          // successful activations
  int64_t swap_failures() const;  // artifacts refused at activation (FAILED_PRECONDITION)
  TensorStore& tensors() const { return *tensors_; }
  ArtifactStore* store() const { return store_.load(std::memory_order_acquire); }
  // Replaces the store (a read-only one by the read-write one once jobs.state_dir opens again). The old one
  // must outlive every reader that loaded it: its owner keeps it.
  void set_store(ArtifactStore* store) { store_.store(store, std::memory_order_release); }

 private:
  ServedKind* find(const std::string& kind) const;

  std::atomic<ArtifactStore*> store_;
  TensorStore* tensors_;
  std::map<std::string, std::unique_ptr<ServedKind>> kinds_;
  // The same kinds, typed (owned by kinds_).
  SlotKind<ServedPrototype>* prototype_ = nullptr;
  SlotKind<RepairActive>* kv_repair_ = nullptr;
  SlotKind<KvSpliceActive>* kvsplice_ = nullptr;
  absl::Mutex activate_mu_;  // one activation at a time
  std::map<std::string, std::string> follow_refused_ ABSL_GUARDED_BY(activate_mu_);  // kind -> refused name
  std::map<std::string, std::string> follow_error_ ABSL_GUARDED_BY(activate_mu_);    // kind -> last logged error
  mutable absl::Mutex model_mu_;
  std::shared_ptr<const LoadedModel> model_ ABSL_GUARDED_BY(model_mu_);
  mutable absl::Mutex counts_mu_;
  int64_t swaps_ ABSL_GUARDED_BY(counts_mu_) = 0;
  int64_t swap_failures_ ABSL_GUARDED_BY(counts_mu_) = 0;
};

}  // namespace frost::serving
