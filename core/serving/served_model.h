#pragma once
// ServedModel: the life cycle of what frostd serves beside its model (Triton keeps this in its core, not in
// the server): the state directory, the artifact store, the registry and its restore / fallback / follow.
// The server creates it from its config, start()s it with the loaded model, hands registry() to the
// services and stop()s it; it holds no gRPC and no server types.
//
//   create()  owner (options.state_dir set: jobs.enabled): locks the state directory and opens
//             <state_dir>/artifacts read-write. When the volume cannot be written (full, read-only,
//             unwritable: a storage error) it opens the store read-only instead and is *degraded*:
//             writable() names why, Generate and Predict serve what is active, and a thread retries
//             every state_retry_s. Another frostd holding the lock, a path of the wrong kind or a damaged
//             store stop the start instead (they need a person).
//             follower (options.follow_state_dir, without state_dir): opens another frostd's store
//             read-only, takes no lock.
//   start()   with the model: restore (every kind's persisted ACTIVE artifact; one that cannot be served
//             is logged and its kind serves nothing), then fallback (the kind's configured file,
//             engine.kv_repair / engine.kv_splice, serves when no artifact of that kind is active), then
//             the follower thread (re-reads the owner's ACTIVE markers every follow_interval_ms), or, for
//             the owner, `on_writable` with the writable store (the server opens the job scheduler there)
//             and, when that cannot happen yet, the retry thread.
//   stop()    stops and joins both threads (the signal wakes them at once). Idempotent.
//
// Threads: start() runs on the caller's (frostd's start-up) thread; the follower ("frost-follow") and the
// state retry ("frost-stateretry") each run on their own thread, and on_writable / the writable listener run
// on whichever thread opened the state (start's or the retry's).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"
#include "core/serving/registry.h"
#include "core/serving/state_dir_lock.h"
#include "core/serving/tensor_store.h"

namespace frost::serving {

struct ServedModelOptions {
  std::string state_dir;         // the owner's state directory ("" = not the owner)
  double state_retry_s = 30;     // degraded: how often the state directory is tried again
  std::string follow_state_dir;  // a follower of another frostd's state directory ("" = none)
  int follow_interval_ms = 2000;
  std::string kv_repair_file, kv_splice_file;  // fallbacks when no artifact of the kind is active ("" = none)
  bool kvsplice_codec_default = false;         // engine.kv_codec is kvsplice: warn when none serves
};

class ServedModel {
 public:
  // Called with the writable store once the state directory opens (at start, or later from the retry
  // thread). A storage error from it keeps the component degraded and retrying; another error fails start().
  using WritableHook = std::function<absl::Status(ArtifactStore& store)>;

  static absl::StatusOr<std::unique_ptr<ServedModel>> create(ServedModelOptions opts);
  ~ServedModel();  // stop()

  // Restore, fallback, then the follower or the writable state (see above). INVALID_ARGUMENT naming the
  // config field when a fallback file cannot be served.
  absl::Status start(std::shared_ptr<const LoadedModel> model, WritableHook on_writable);
  void stop();

  // Called with false when the owner's state becomes unavailable (at start) and true when it opens again
  // (from the retry thread). Set before start().
  void set_writable_listener(std::function<void(bool)> f) { writable_listener_ = std::move(f); }
  // OK when the owner's state is open for writing (or this is no owner); otherwise UNAVAILABLE naming the
  // state directory, why, and the retry interval.
  absl::Status writable() const;

  Registry& registry() { return registry_; }
  const Registry& registry() const { return registry_; }
  TensorStore& tensors() { return tensors_; }
  // The artifact store (nullptr when artifacts are disabled): read-write once the state directory opens.
  ArtifactStore* store() const { return registry_.store(); }
  // nullptr before start().
  std::shared_ptr<const LoadedModel> model() const { return registry_.model(); }

  // Errors of the volume under the state directory (full, read-only, unwritable, failing), after which frostd
  // serves without jobs rather than not at all.
  static bool is_storage_error(const absl::Status& st);

 private:
  ServedModel(ServedModelOptions opts, std::unique_ptr<StateDirLock> lock,
              std::unique_ptr<ArtifactStore> store);

  // The writable state: the lock, the store read-write (each only when missing), then on_writable_.
  absl::Status open_writable();
  void set_unavailable(const absl::Status& why);
  // A thread named `name` that calls `tick` every `every` (outside stop_mu_) until it returns true or stop().
  std::thread start_periodic(const char* name, absl::Duration every, std::function<bool()> tick);

  ServedModelOptions opts_;
  std::unique_ptr<StateDirLock> lock_;
  std::unique_ptr<ArtifactStore> store_;
  std::vector<std::unique_ptr<ArtifactStore>> retired_stores_;  // replaced ones (readers may hold them)
  TensorStore tensors_;
  Registry registry_;
  WritableHook on_writable_;
  std::function<void(bool)> writable_listener_;
  std::thread follower_, state_retry_;
  absl::Mutex stop_mu_;
  absl::CondVar stop_cv_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  mutable absl::Mutex mu_;
  absl::Status unavailable_ ABSL_GUARDED_BY(mu_);
};

}  // namespace frost::serving
