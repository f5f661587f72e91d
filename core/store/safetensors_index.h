#pragma once
// The index of a sharded safetensors checkpoint, model.safetensors.index.json as transformers'
// save_pretrained writes it: {"metadata": {"total_size": N}, "weight_map": {"<tensor>": "<shard file>", ...}}.
//
// parse_safetensors_index() reads the text (every error INVALID_ARGUMENT prefixed with the label): the top level
// is an object with an object "weight_map" of strings; a tensor listed twice is refused (JSON keeps the last
// silently); a shard is a plain file name ending in ".safetensors" (no directory part, so an index cannot reach
// outside its checkpoint). check_safetensors_index() then holds the opened shards to it.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/store/safetensors.h"

namespace frost {

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";

struct SafetensorsIndex {
  std::map<std::string, std::string> weight_map;  // tensor name → shard file name
  std::vector<std::string> shards;                // the distinct shard file names, sorted
};

absl::StatusOr<SafetensorsIndex> parse_safetensors_index(std::string_view text, const std::string& label);

// `shards[i]` is the opened file of index.shards[i]. INVALID_ARGUMENT, naming the file and the tensor, when the
// index maps a tensor to a shard that does not hold it, or a shard holds a tensor the index does not list or
// maps to another shard. `label` names the index in messages.
absl::Status check_safetensors_index(const SafetensorsIndex& index, const std::vector<const SafetensorsFile*>& shards,
                                     const std::string& label);

}  // namespace frost
