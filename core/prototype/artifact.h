#pragma once
// PrototypeArtifact: everything Predict needs, saved as <dir>/prototype.safetensors plus
// <dir>/manifest.json (written last, carrying the tensor file's sha256 and size).
//
// Tensors (fp32 unless noted):
//   every PrototypeNet tensor under its net name (head, compressors, W_q/W_m, key readout, E,
//     resTR, slots, g_emb; the Stage-A encoder is kept because RLCS needs the query's key)
//   proto.memory   [K, m, d] fp16  MemCache rows of the final prototypes
//   proto.labels   [K]             their labels
//   cache.keys     [N, d]    fp16  the full normalised KeyCache (RLCS neighbours)
//   cache.labels   [N]             LabelCache
//   rlcs.population [N]            sorted leave-one-out mean top-k cosine of every training key:
//                                  the reference distribution of population consistency
// Manifest: format/version, backbone identity, config, bounds, label statistics, the prototypes
// (slot, dataset index, id, text, label), training report.
//
// Loading checks the manifest fields, the sha256, every tensor name and shape; anything off is
// INVALID_ARGUMENT naming the file and field, never a crash. Tensors are loaded bit-exactly.
#include <ATen/ATen.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/prototype/config.h"
#include "core/prototype/data.h"
#include "core/prototype/features.h"

namespace frost::prototype {

inline constexpr char kArtifactFormat[] = "frost.prototype";
inline constexpr int kArtifactVersion = 1;

struct PrototypeEntry {
  int64_t slot = 0;
  int64_t index = 0;  // row in the training data
  std::string id;     // the row's "id" ("" when it had none)
  std::string text;
  float label = 0;
};

struct PrototypeArtifact {
  PrototypeConfig cfg;
  BackboneId backbone;
  LabelBounds bounds;
  double label_mu = 0, label_sigma = 1;
  int64_t d_model = 0;
  int64_t n_train = 0;
  std::vector<PrototypeEntry> prototypes;                   // K, slot order
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // see above
  nlohmann::json report = nlohmann::json::object();         // training summary (informative)

  at::Tensor tensor(const std::string& name) const;  // undefined when absent
  int64_t tensor_bytes() const;
};

// Writes dir/prototype.safetensors then dir/manifest.json, each atomically (creates dir).
// Returns the bytes written.
absl::StatusOr<int64_t> save_artifact(const PrototypeArtifact& art, const std::string& dir);
absl::StatusOr<PrototypeArtifact> load_artifact(const std::string& dir);

}  // namespace frost::prototype
