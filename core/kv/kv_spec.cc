#include "core/kv/kv_spec.h"

#include "absl/strings/str_cat.h"

namespace frost {

const char* kv_codec_name(KvCodecKind k) {
  switch (k) {
    case KvCodecKind::kF32:
      return "fp32";
    case KvCodecKind::kF16:
      return "fp16";
    case KvCodecKind::kBF16:
      return "bf16";
    case KvCodecKind::kInt8:
      return "int8";
    case KvCodecKind::kInt4:
      return "int4";
    case KvCodecKind::kKvSplice:
      return "kvsplice";
  }
  return "?";
}

absl::StatusOr<KvCodecKind> parse_kv_codec(const std::string& name) {
  if (name == "fp32") return KvCodecKind::kF32;
  if (name == "fp16") return KvCodecKind::kF16;
  if (name == "bf16") return KvCodecKind::kBF16;
  if (name == "int8") return KvCodecKind::kInt8;
  if (name == "int4") return KvCodecKind::kInt4;
  if (name == "kvsplice") return KvCodecKind::kKvSplice;
  return absl::InvalidArgumentError(
      absl::StrCat("kv codec: unknown value \"", name, "\" (expected fp32|fp16|bf16|int8|int4|kvsplice)"));
}

}  // namespace frost
