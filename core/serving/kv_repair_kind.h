#pragma once
// The `kv_repair` kind: a KV repair operator (core/kv/repair_set.h) that Generate applies to sequences
// stored with the codec it was trained for. The engine reads RepairSlot (EngineConfig::kv_repair).
#include <memory>

#include "core/kv/repair_set.h"
#include "core/serving/served_kind.h"

namespace frost::serving {

// Artifacts load through jobs::load_kv_repair_artifact (manifest + checksum first); engine.kv_repair files
// through load_served_repair. Either must match the served model (dimensions, and its "model" metadata).
std::unique_ptr<ServedKind> make_kv_repair_kind();

}  // namespace frost::serving
