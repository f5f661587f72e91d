#pragma once
// The KV-layer dimension structs of a model: core/kv sits below core/model and cannot see ModelConfig,
// so the model fills them in here.
#include "core/kv/kvsplice.h"
#include "core/kv/repair_set.h"
#include "core/model/model_config.h"

namespace frost {

inline KvSpliceDims kvsplice_dims(const ModelConfig& c) { return {c.n_layer, c.n_head_kv, c.head_dim}; }
inline RepairDims repair_dims(const ModelConfig& c) { return {c.head_dim, c.n_head, c.n_layer}; }

}  // namespace frost
