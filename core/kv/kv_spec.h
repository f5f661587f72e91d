#pragma once
// KvSpec: the shape and storage codec of one sequence's KV cache.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace frost {

class KvSpliceSet;

// Storage codecs (core/kv/codec.h). kKvSplice stores a learned low-rank latent (core/kv/kvsplice.h)
// and needs a KvSpliceSet on the spec.
enum class KvCodecKind { kF32, kF16, kBF16, kInt8, kInt4, kKvSplice };

const char* kv_codec_name(KvCodecKind k);  // "fp32" | "fp16" | "bf16" | "int8" | "int4" | "kvsplice"
// Parses those names; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<KvCodecKind> parse_kv_codec(const std::string& name);

struct KvSpec {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t max_tokens = 0;  // capacity: storage is preallocated for this many positions
  KvCodecKind codec = KvCodecKind::kF32;
  std::shared_ptr<const KvSpliceSet> splice;  // kKvSplice only: the per-layer splices
  // Layers that also keep a reverse store (SequenceKv::reverse): the SBA layers of the model
  // (core/model/variants.h). Empty for plain models.
  std::vector<int64_t> reverse_layers;
  // The sliding window every layer attends within (a query at p reads keys p - window < j <= p), > 0 only when
  // EVERY layer slides (Mistral; the model passes the largest of its layers' windows: a block is dead only when no
  // layer reads it; core/model Transformer::kv_spec). A block
  // holds all layers, so with any global layer (Gemma 2/3's local/global mix, Qwen2's max_window_layers) this is
  // 0 and nothing can be released. A paged sequence gives back the blocks wholly below its window
  // (SequenceKv::release_outside_window). 0: every position stays readable.
  int64_t window = 0;
};

}  // namespace frost
