#pragma once
// The `kv_repair` kind: a KV repair operator (core/kv/repair_set.h) that Generate applies to sequences
// stored with the codec it was trained for. The engine reads RepairSlot (EngineConfig::kv_repair).
//
// Artifact files (written by the kv_repair job, core/jobs/kv_repair_job.h): kKvRepairFile
// (RepairSet::save, metadata codec / corruption / model) and manifest.json naming it with kKvRepairFormat
// (core/serving/checked_file.h), written last.
#include <memory>
#include <string>

#include "core/kv/repair_set.h"
#include "core/serving/served_kind.h"

namespace frost::serving {

inline constexpr char kKvRepairFile[] = "repair.safetensors";
inline constexpr char kKvRepairFormat[] = "frost.kv_repair.v1";

// Artifacts load through load_kv_repair_artifact (manifest + checksum first); engine.kv_repair files
// through load_served_repair. Either must match the served model (dimensions, and its "model" metadata).
std::unique_ptr<SlotKind<RepairActive>> make_kv_repair_kind();

// Verifies and loads a kv_repair artifact directory for serving (the errors name the file: INVALID_ARGUMENT
// or DATA_LOSS; the registry makes them FAILED_PRECONDITION).
absl::StatusOr<std::shared_ptr<const RepairSlot::Active>> load_kv_repair_artifact(const std::string& dir,
                                                                                  const RepairDims& dims,
                                                                                  const std::string& name,
                                                                                  const std::string& model);

}  // namespace frost::serving
