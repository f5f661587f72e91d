#pragma once
// ServedKind: one kind of artifact frostd serves (a prototype head for Predict, a KV repair operator or a
// KVSplice for Generate), as the Registry (core/serving/registry.h) sees it: verify and load a version, swap
// it in, say what is active. SlotKind<T> is the usual shape — a loader plus an ActiveSlot<T> that Generate /
// Predict take their snapshot from — so a kind's own file only says how to load and describe one version.
//
// A new kind: one file with a SlotKind<T> subclass and its make_*_kind() factory, listed in registry.cc.
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/common/active_slot.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"

namespace frost::serving {

class ServedKind {
 public:
  virtual ~ServedKind() = default;
  // The <kind> of its artifacts' names "<kind>/<version>".
  virtual const std::string& kind() const = 0;
  // What it turns on, for messages ("Predict", "KV repair", "kv.codec kvsplice").
  virtual const char* serves() const = 0;
  // Verifies and loads `a` for `model` (nothing is swapped yet), then runs `persist` (the registry records
  // the activation durably), then swaps the new version in: requests started before keep the version they
  // took. The error of a version that cannot serve names why (the registry turns it into FAILED_PRECONDITION);
  // when loading or persisting fails, the active version is unchanged.
  virtual absl::Status activate(const ArtifactInfo& a, const std::shared_ptr<const LoadedModel>& model,
                                const std::function<absl::Status()>& persist) = 0;
  // Serves a file the config names (not an artifact; nothing persisted). UNIMPLEMENTED for kinds without one.
  virtual absl::Status serve_file(const std::string& path, const std::shared_ptr<const LoadedModel>& model) = 0;
  // The active version's name ("" = none) and one line about it ("" = none).
  virtual std::string active_name() const = 0;
  virtual std::string describe() const = 0;
};

// A kind whose active version is a std::shared_ptr<const T> in an ActiveSlot<T> (T has a `name` member).
template <class T>
class SlotKind : public ServedKind {
 public:
  using Loaded = std::shared_ptr<const T>;
  explicit SlotKind(std::string kind) : kind_(std::move(kind)) {}

  // What Generate / Predict read: the active version, hot-swappable.
  ActiveSlot<T>& slot() { return slot_; }
  const ActiveSlot<T>& slot() const { return slot_; }

  const std::string& kind() const override { return kind_; }
  absl::Status activate(const ArtifactInfo& a, const std::shared_ptr<const LoadedModel>& model,
                        const std::function<absl::Status()>& persist) override {
    absl::StatusOr<Loaded> v = load(a, model);
    if (!v.ok()) return v.status();
    if (absl::Status st = persist(); !st.ok()) return st;  // persisted before it serves
    slot_.set(*std::move(v));
    return absl::OkStatus();
  }
  absl::Status serve_file(const std::string& path, const std::shared_ptr<const LoadedModel>& model) override {
    absl::StatusOr<Loaded> v = load_file(path, model);
    if (!v.ok()) return v.status();
    slot_.set(*std::move(v));
    return absl::OkStatus();
  }
  std::string active_name() const override {
    Loaded a = slot_.get();
    return a ? a->name : "";
  }
  std::string describe() const override {
    Loaded a = slot_.get();
    return a ? describe(*a) : "";
  }

 protected:
  // Verify + load one artifact version for `model`.
  virtual absl::StatusOr<Loaded> load(const ArtifactInfo& a,
                                      const std::shared_ptr<const LoadedModel>& model) const = 0;
  virtual absl::StatusOr<Loaded> load_file(const std::string& path,
                                           const std::shared_ptr<const LoadedModel>& model) const {
    return absl::UnimplementedError(kind_ + " artifacts cannot be served from a file");
  }
  virtual std::string describe(const T& active) const = 0;

 private:
  std::string kind_;
  ActiveSlot<T> slot_;
};

}  // namespace frost::serving
