#pragma once
// RepairSet: the repair operators R_phi of one model — one RepairLayer per protected layer (and the
// shared part for option C) — plus their frozen fast-path copies and the file format of a
// `kv_repair` artifact. Attached to a sequence with SequenceKv::set_repair (core/kv/sequence_kv.h).
//
// File (repair.safetensors): tensors "layers.<l>.<name>" (RepairLayer::named_parameters) and
// "shared.<name>" (option C), F32; metadata:
//   format "frost.kv_repair.v1", option A|B|C, rank, apply_to K|V|KV, alpha_max, contraction_rho,
//   layers "3,4" (protected, ascending), head_dim, n_heads, n_layers,
//   plus whatever the writer adds (codec, corruption, model) under other keys.
// load() checks the format, every field, every tensor's presence and shape, and the model's
// dimensions: a file made for another model is INVALID_ARGUMENT naming the field and both values.
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/active_slot.h"
#include "core/kv/kv_spec.h"
#include "core/kv/repair.h"

namespace frost {

struct RepairDims {
  int64_t head_dim = 0, n_heads = 0, n_layers = 0;
};
// repair_dims(ModelConfig) lives in core/model/kv_dims.h (kv sits below the model).

// "2,3" | "2-4" | "all" | "mid" (the middle ⌈L/3⌉ layers, the seed's mid-layer block) → ascending
// layer indices, each < n_layers. INVALID_ARGUMENT naming the text otherwise.
absl::StatusOr<std::vector<int64_t>> parse_repair_layers(const std::string& text, int64_t n_layers);
std::string repair_layers_string(const std::vector<int64_t>& layers);  // "2,3"

class RepairSet {
 public:
  // Fresh seeded operators for `layers` (validated: non-empty, ascending, < n_layers, rank <= head_dim).
  static absl::StatusOr<std::shared_ptr<RepairSet>> create(const RepairConfig& cfg,
                                                           std::vector<int64_t> layers,
                                                           const RepairDims& dims, uint64_t seed);
  // Reads repair.safetensors written by save(); checks it against `dims` (see above).
  static absl::StatusOr<std::shared_ptr<RepairSet>> load(const std::string& path, const RepairDims& dims);
  // Writes atomically. `extra` metadata keys must not clash with the format's.
  absl::Status save(const std::string& path, const std::map<std::string, std::string>& extra = {}) const;

  const RepairConfig& cfg() const { return cfg_; }
  const RepairDims& dims() const { return dims_; }
  const std::vector<int64_t>& layers() const { return layers_; }
  // The operator of layer l, nullptr when l is not protected.
  const RepairLayer* layer(int64_t l) const;
  // Fast-path copies; valid after freeze() (create/load freeze; call again after training steps).
  const RepairLayer::Fast* fast(int64_t l) const;
  void freeze();

  // Every trainable tensor once (option C: the shared part, then each layer's embedding row).
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<at::Tensor> parameters() const;
  int64_t n_params() const;
  int64_t bytes() const { return n_params() * 4; }
  // Metadata read from the file (empty for a created set).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  RepairSet() = default;
  RepairConfig cfg_;
  RepairDims dims_;
  std::vector<int64_t> layers_;
  std::shared_ptr<RepairShared> shared_;
  std::vector<std::unique_ptr<RepairLayer>> by_layer_;  // n_layers entries, null = unprotected
  std::vector<RepairLayer::Fast> fast_;                 // n_layers entries
  std::map<std::string, std::string> metadata_;
};

// The repair operator a server applies to new sequences, hot-swappable: a sequence takes the Active it
// saw when it started and keeps it to its end. An operator is trained for one storage codec and
// serves sequences stored with that codec only.
struct RepairActive {
  std::shared_ptr<const RepairSet> set;
  std::string name;  // "kv_repair/3" or "file:<path>"
  KvCodecKind codec = KvCodecKind::kInt4;
};
using RepairSlot = ActiveSlot<RepairActive>;

// Loads a repair file for serving: its "codec" metadata names the codec it repairs (INVALID_ARGUMENT
// when missing or unknown), and a "model" entry, when present, must equal `model` (an operator learned
// on one model's caches is wrong for another of the same shape).
absl::StatusOr<std::shared_ptr<const RepairSlot::Active>> load_served_repair(const std::string& path,
                                                                             const RepairDims& dims,
                                                                             const std::string& name,
                                                                             const std::string& model);

}  // namespace frost
