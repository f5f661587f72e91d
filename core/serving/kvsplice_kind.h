#pragma once
// The `kvsplice` kind: a KVSplice (core/kv/kvsplice.h) that Generate stores kv.codec = "kvsplice"
// sequences with. The engine reads KvSpliceSlot (EngineConfig::kv_splice); a sequence keeps the set it
// started with.
#include <memory>

#include "core/kv/kvsplice.h"
#include "core/serving/served_kind.h"

namespace frost::serving {

// Artifacts load through jobs::load_kvsplice_artifact (manifest + checksum first); engine.kv_splice files
// through load_served_kvsplice. Either must match the served model.
std::unique_ptr<ServedKind> make_kvsplice_kind();

}  // namespace frost::serving
