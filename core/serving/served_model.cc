#include "core/serving/served_model.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"
#include "core/prototype/device.h"

namespace frost::serving {

namespace {

// The writable half of the state directory: its lock (taken when *lock is empty) and the artifact store
// opened read-write into *store.
absl::Status open_writable_state(const std::string& dir, std::unique_ptr<StateDirLock>* lock,
                                 std::unique_ptr<ArtifactStore>* store) {
  if (!*lock) {
    FROST_ASSIGN_OR_RETURN(*lock, StateDirLock::acquire(dir));
  }
  FROST_ASSIGN_OR_RETURN(*store, ArtifactStore::open(dir + "/artifacts"));
  return absl::OkStatus();
}

}  // namespace

// Not: another frostd holding the lock (FAILED_PRECONDITION), a path of the wrong kind (INVALID_ARGUMENT) or
// a damaged journal or store (DATA_LOSS) — those need a person and stop the start.
bool ServedModel::is_storage_error(const absl::Status& st) {
  return absl::IsResourceExhausted(st) || absl::IsPermissionDenied(st) || absl::IsUnavailable(st);
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::create(ServedModelOptions opts) {
  std::unique_ptr<StateDirLock> lock;
  std::unique_ptr<ArtifactStore> store;
  absl::Status unavailable;
  if (!opts.state_dir.empty()) {
    const absl::Status st = open_writable_state(opts.state_dir, &lock, &store);
    if (!st.ok() && !is_storage_error(st)) return st;
    if (!st.ok()) {
      // Serve what is active from the store as it is on disk; the writable state comes back once it opens.
      unavailable = st;
      FROST_ASSIGN_OR_RETURN(store, ArtifactStore::open_read_only(
                                        opts.state_dir + "/artifacts",
                                        absl::StrCat("jobs.state_dir is unavailable (", st.message(), ")")));
    }
  } else if (!opts.follow_state_dir.empty()) {
    // No lock: the owner holds it; this process only reads. A store that does not exist yet (the trainer
    // has not started) serves nothing until it does.
    FROST_ASSIGN_OR_RETURN(store, ArtifactStore::open_read_only(opts.follow_state_dir + "/artifacts"));
    FROST_LOG_INFO("frostd: following the artifact store %s read-only every %d ms", store->root().c_str(),
                   opts.follow_interval_ms);
  }
  std::unique_ptr<ServedModel> sm(new ServedModel(std::move(opts), std::move(lock), std::move(store)));
  if (!unavailable.ok()) sm->set_unavailable(unavailable);
  return sm;
}

ServedModel::ServedModel(ServedModelOptions opts, std::unique_ptr<StateDirLock> lock,
                         std::unique_ptr<ArtifactStore> store)
    : opts_(std::move(opts)),
      lock_(std::move(lock)),
      store_(std::move(store)),
      registry_(store_.get(), &tensors_) {}

ServedModel::~ServedModel() { stop(); }

absl::Status ServedModel::start(std::shared_ptr<const LoadedModel> model, WritableHook on_writable) {
  registry_.set_model(model);
  on_writable_ = std::move(on_writable);
  if (model) {  // where Predict's head and the prototype jobs compute, and the store accounts their bytes
    const prototype::ComputeDevice dev = prototype::compute_device(*model);
    tensors_.set_device(dev.name);
    FROST_LOG_INFO("prototype head computes on %s: %s", dev.name.c_str(), dev.reason.c_str());
  }
  // Restore first: a persisted activation outranks the config's file for its kind.
  const std::set<std::string> restored = registry_.restore(model);
  if (!restored.count("kv_repair") && !opts_.kv_repair_file.empty())
    FROST_RETURN_IF_ERROR(registry_.serve_file("kv_repair", "engine.kv_repair", opts_.kv_repair_file, model));
  if (!restored.count("kvsplice") && !opts_.kv_splice_file.empty())
    FROST_RETURN_IF_ERROR(registry_.serve_file("kvsplice", "engine.kv_splice", opts_.kv_splice_file, model));
  if (opts_.kvsplice_codec_default && registry_.active_name("kvsplice").empty()) {
    FROST_LOG_WARN(
        "frostd: engine.kv_codec is kvsplice but no KVSplice is active: requests without kv.codec fail "
        "FAILED_PRECONDITION until a kvsplice artifact is activated (or engine.kv_splice is set)");
  }
  if (opts_.state_dir.empty()) {
    if (store_ && store_->read_only()) {
      follower_ = start_periodic("frost-follow", absl::Milliseconds(opts_.follow_interval_ms), [this] {
        registry_.follow(registry_.model());
        return false;
      });
    }
    return absl::OkStatus();
  }
  if (writable().ok()) {
    absl::Status st = open_writable();
    if (!st.ok() && !is_storage_error(st)) return st;
    if (!st.ok()) set_unavailable(st);
  }
  if (!writable().ok()) {
    if (writable_listener_) writable_listener_(false);
    state_retry_ = start_periodic(
        "frost-stateretry", absl::Seconds(opts_.state_retry_s), [this, last_error = std::string()]() mutable {
          absl::Status st = open_writable();
          if (st.ok()) {
            set_unavailable(absl::OkStatus());
            FROST_LOG_INFO(
                "frostd: jobs.state_dir \"%s\" opened: training jobs are "
                "available again",
                opts_.state_dir.c_str());
            if (writable_listener_) writable_listener_(true);
            return true;
          }
          if (std::string(st.message()) != last_error) {
            last_error = std::string(st.message());  // once per distinct error
            FROST_LOG_WARN("frostd: jobs.state_dir still unavailable: %s", last_error.c_str());
          }
          return false;
        });
  }
  return absl::OkStatus();
}

absl::Status ServedModel::open_writable() {
  if (store_ == nullptr || store_->read_only()) {
    std::unique_ptr<ArtifactStore> rw;
    FROST_RETURN_IF_ERROR(open_writable_state(opts_.state_dir, &lock_, &rw));
    registry_.set_store(rw.get());
    if (store_) retired_stores_.push_back(std::move(store_));
    store_ = std::move(rw);
  }
  return on_writable_ ? on_writable_(*store_) : absl::OkStatus();
}

absl::Status ServedModel::writable() const {
  absl::MutexLock l(&mu_);
  return unavailable_;
}

void ServedModel::set_unavailable(const absl::Status& why) {
  absl::MutexLock l(&mu_);
  unavailable_ =
      why.ok() ? why
               : absl::UnavailableError(absl::StrCat("training jobs are unavailable: jobs.state_dir \"",
                                                     opts_.state_dir, "\" cannot be used (", why.message(),
                                                     "); retrying every ", opts_.state_retry_s, " s"));
  if (!why.ok())
    FROST_LOG_ERROR("frostd: %s; serving continues", std::string(unavailable_.message()).c_str());
}

std::thread ServedModel::start_periodic(const char* name, absl::Duration every, std::function<bool()> tick) {
  return std::thread([this, name, every, tick = std::move(tick)] {
    pthread_setname_np(pthread_self(), name);
    absl::MutexLock l(&stop_mu_);
    while (!stop_) {
      stop_cv_.WaitWithTimeout(&stop_mu_, every);
      if (stop_) break;
      stop_mu_.Unlock();  // loading an artifact or opening the journal must not hold up stop()'s signal
      const bool done = tick();
      stop_mu_.Lock();
      if (done) break;
    }
  });
}

void ServedModel::stop() {
  {
    absl::MutexLock l(&stop_mu_);
    stop_ = true;
    stop_cv_.SignalAll();
  }
  if (follower_.joinable()) follower_.join();
  if (state_retry_.joinable()) state_retry_.join();
}

}  // namespace frost::serving
