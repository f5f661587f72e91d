#pragma once
// The weight files of a Hugging Face checkpoint directory, opened and checked before any tensor is read.
//
//   - With model.safetensors.index.json (a sharded checkpoint): exactly the shards its weight_map names, each
//     held to the index (core/store/safetensors_index.h). A shard that is absent is NOT_FOUND naming the shard
//     and a tensor it should hold; other *.safetensors files in the directory (a consolidated copy some
//     repositories ship next to the shards) are not read.
//   - Without one: every *.safetensors in the directory, sorted by name. Only pickle / TorchScript weights is
//     INVALID_ARGUMENT "unsupported format: use safetensors"; no weights at all is NOT_FOUND.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/store/safetensors.h"

namespace frost {

absl::StatusOr<std::vector<std::unique_ptr<SafetensorsFile>>> open_checkpoint_weights(const std::string& dir);

}  // namespace frost
