#include "core/serving/registry.h"

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/status_macros.h"

namespace frost::serving {

Registry::Registry(ArtifactStore* store, TensorStore* tensors) : store_(store), tensors_(tensors) {
  // The kinds this build serves: one line each, plus its typed accessor in registry.h.
  auto add = [this](auto k) {
    auto* typed = k.get();
    const std::string kind = k->kind();
    kinds_.emplace(kind, std::move(k));
    return typed;
  };
  prototype_ = add(make_prototype_kind(tensors));
  kv_repair_ = add(make_kv_repair_kind());
  kvsplice_ = add(make_kvsplice_kind());
}

void Registry::set_model(std::shared_ptr<const LoadedModel> model) {
  absl::MutexLock l(&model_mu_);
  model_ = std::move(model);
}

std::shared_ptr<const LoadedModel> Registry::model() const {
  absl::MutexLock l(&model_mu_);
  return model_;
}

std::vector<std::string> Registry::kinds() const {
  std::vector<std::string> out;
  for (const auto& [kind, k] : kinds_) out.push_back(kind);
  return out;
}

ServedKind* Registry::find(const std::string& kind) const {
  auto it = kinds_.find(kind);
  return it == kinds_.end() ? nullptr : it->second.get();
}

absl::StatusOr<ArtifactInfo> Registry::activate(const std::string& name,
                                                const std::shared_ptr<const LoadedModel>& model) {
  if (!store()) return absl::FailedPreconditionError("artifacts are disabled (jobs.enabled: false)");
  if (!model) return absl::UnavailableError("model is loading: not ready yet");
  if (absl::Status w = store()->check_writable("activate"); !w.ok() && !absl::IsFailedPrecondition(w)) return w;
  if (store()->read_only()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this frostd follows the artifact store ", store()->root(),
        " read-only (artifacts.follow_state_dir): activate on the frostd that owns it, and this one follows"));
  }
  FROST_RETURN_IF_ERROR(parse_artifact_name(name).status());
  FROST_ASSIGN_OR_RETURN(ArtifactInfo a, store()->get(name));
  ServedKind* k = find(a.kind);
  if (!k) return absl::FailedPreconditionError(absl::StrCat("artifact '", a.name, "': kind '", a.kind, "' is not served"));
  absl::MutexLock l(&activate_mu_);
  absl::Status persist_status;
  // A damaged file is refused before the kind reads anything.
  absl::Status st = store()->verify(a);
  if (st.ok()) st = k->activate(a, model, [&] { return persist_status = store()->set_active(a.kind, a.name); });
  if (!st.ok()) {
    if (!persist_status.ok()) return persist_status;  // the store failed, not the artifact
    absl::MutexLock c(&counts_mu_);
    ++swap_failures_;
    return absl::FailedPreconditionError(absl::StrCat("artifact '", a.name, "' cannot be activated: ", st.message()));
  }
  {
    absl::MutexLock c(&counts_mu_);
    ++swaps_;
  }
  FROST_LOG_INFO("frostd: activated %s (%s)", a.name.c_str(), k->describe().c_str());
  return a;
}

std::set<std::string> Registry::restore(const std::shared_ptr<const LoadedModel>& model) {
  std::set<std::string> restored;
  if (!store()) return restored;
  if (store()->read_only()) return follow(model);  // a follower serves what the owner's markers say
  for (const auto& [kind, k] : kinds_) {
    absl::StatusOr<std::optional<std::string>> active = store()->active(kind);
    if (!active.ok()) {
      FROST_LOG_ERROR("frostd: %s", active.status().ToString().c_str());
      continue;
    }
    if (!active->has_value()) continue;
    // activate() logs the success; it also rewrites ACTIVE with the same name (harmless).
    if (absl::Status st = activate(**active, model).status(); !st.ok()) {
      FROST_LOG_ERROR("frostd: the active %s artifact %s cannot be served (%s is off until one is activated): %s",
                      kind.c_str(), (*active)->c_str(), k->serves(), st.ToString().c_str());
      continue;
    }
    restored.insert(kind);
  }
  return restored;
}

std::set<std::string> Registry::follow(const std::shared_ptr<const LoadedModel>& model) {
  std::set<std::string> swapped;
  if (!store() || !model) return swapped;
  absl::MutexLock l(&activate_mu_);
  for (const auto& [kind, k] : kinds_) {
    // Logs `msg` once per distinct message for this kind (the follower polls every few seconds).
    auto log_once = [&, kind = kind](const std::string& msg) {
      if (follow_error_[kind] == msg) return;
      follow_error_[kind] = msg;
      FROST_LOG_ERROR("frostd: following %s: %s", store()->root().c_str(), msg.c_str());
    };
    absl::StatusOr<std::optional<std::string>> marker = store()->active(kind);
    if (!marker.ok()) {
      log_once(marker.status().ToString());
      continue;
    }
    if (!marker->has_value() || **marker == k->active_name()) continue;
    const std::string& name = **marker;
    if (follow_refused_[kind] == name) continue;
    absl::StatusOr<ArtifactInfo> a = store()->get(name);
    absl::Status st = a.status();
    if (a.ok()) st = a->kind != kind ? absl::FailedPreconditionError("the marker names another kind")
                                     : store()->verify(*a);
    if (a.ok() && st.ok()) st = k->activate(*a, model, [] { return absl::OkStatus(); });
    if (!st.ok()) {
      log_once(absl::StrCat("the active ", kind, " artifact ", name, " cannot be served (the served one stays): ",
                            st.ToString()));
      if (absl::IsNotFound(st)) continue;  // not visible yet on this volume: try again next time
      follow_refused_[kind] = name;
      absl::MutexLock c(&counts_mu_);
      ++swap_failures_;
      continue;
    }
    follow_error_.erase(kind);
    follow_refused_.erase(kind);
    {
      absl::MutexLock c(&counts_mu_);
      ++swaps_;
    }
    FROST_LOG_INFO("frostd: following %s: activated %s (%s)", store()->root().c_str(), name.c_str(),
                   k->describe().c_str());
    swapped.insert(kind);
  }
  return swapped;
}

absl::Status Registry::serve_file(const std::string& kind, const std::string& field, const std::string& path,
                                  const std::shared_ptr<const LoadedModel>& model) {
  ServedKind* k = find(kind);
  if (!k) return absl::InvalidArgumentError(absl::StrCat(field, ": no served kind '", kind, "'"));
  if (absl::Status st = k->serve_file(path, model); !st.ok())
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", st.message()));
  FROST_LOG_INFO("frostd: serving %s (%s)", k->active_name().c_str(), k->describe().c_str());
  return absl::OkStatus();
}

std::vector<std::string> Registry::active_names() const {
  std::vector<std::string> out;
  for (const auto& [kind, k] : kinds_)
    if (std::string n = k->active_name(); !n.empty()) out.push_back(std::move(n));
  return out;
}

bool Registry::is_active(const std::string& name) const {
  for (const auto& [kind, k] : kinds_)
    if (k->active_name() == name) return true;
  return false;
}

std::string Registry::active_name(const std::string& kind) const {
  ServedKind* k = find(kind);
  return k ? k->active_name() : "";
}

std::string Registry::describe(const std::string& kind) const {
  ServedKind* k = find(kind);
  return k ? k->describe() : "";
}

int64_t Registry::swaps() const {
  absl::MutexLock c(&counts_mu_);
  return swaps_;
}

int64_t Registry::swap_failures() const {
  absl::MutexLock c(&counts_mu_);
  return swap_failures_;
}

}  // namespace frost::serving
