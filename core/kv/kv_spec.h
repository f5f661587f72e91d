#pragma once
// KvSpec: the shape and storage codec of one sequence's KV cache.
#include <cstdint>

#include "absl/status/statusor.h"
#include <string>

namespace frost {

// Storage codecs. int8 / int4 / kvsplice arrive with later issues behind the same KvCodec
// interface (core/kv/codec.h).
enum class KvCodecKind { kF32, kF16, kBF16 };

const char* kv_codec_name(KvCodecKind k);  // "fp32" | "fp16" | "bf16"
// Parses "fp32" | "fp16" | "bf16"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<KvCodecKind> parse_kv_codec(const std::string& name);

struct KvSpec {
  int64_t n_layer = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t max_tokens = 0;  // capacity: storage is preallocated for this many positions
  KvCodecKind codec = KvCodecKind::kF32;
};

}  // namespace frost
