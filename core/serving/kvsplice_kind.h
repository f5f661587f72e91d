#pragma once
// The `kvsplice` kind: a KVSplice (core/kv/kvsplice.h) that Generate stores kv.codec = "kvsplice"
// sequences with. The engine reads KvSpliceSlot (EngineConfig::kv_splice); a sequence keeps the set it
// started with.
//
// Artifact files (written by the kvsplice job, core/jobs/kvsplice_job.h): kKvSpliceFile (KvSpliceSet::save,
// metadata model) and manifest.json naming it with kKvSpliceFormat (core/serving/checked_file.h), written
// last.
#include <memory>
#include <string>

#include "core/kv/kvsplice.h"
#include "core/serving/served_kind.h"

namespace frost::serving {

inline constexpr char kKvSpliceFile[] = "kvsplice.safetensors";
inline constexpr char kKvSpliceFormat[] = "frost.kvsplice.v1";

// Artifacts load through load_kvsplice_artifact (manifest + checksum first); engine.kv_splice files
// through load_served_kvsplice. Either must match the served model.
std::unique_ptr<SlotKind<KvSpliceActive>> make_kvsplice_kind();

// Verifies (manifest, sha256) and loads a kvsplice artifact directory for serving.
absl::StatusOr<std::shared_ptr<const KvSpliceSlot::Active>> load_kvsplice_artifact(const std::string& dir,
                                                                                   const KvSpliceDims& dims,
                                                                                   const std::string& name,
                                                                                   const std::string& model);

}  // namespace frost::serving
