#pragma once
// What every job kind is built with: where its inputs may come from, the backbone it trains through, and the
// store it publishes into. Each kind's options derive from it (prototype_job.h adds the inline-row caps), so
// frostd fills these three once (server/runtime.cc) instead of once per kind.
#include <memory>
#include <string>

#include "core/model/model_loader.h"
#include "core/serving/artifact_store.h"

namespace frost::jobs {

struct JobKindOptions {
  std::string data_root;                     // data paths of a spec must resolve inside it
  std::shared_ptr<const LoadedModel> model;  // the serving backbone
  serving::ArtifactStore* store = nullptr;   // where the artifact is published
};

}  // namespace frost::jobs
