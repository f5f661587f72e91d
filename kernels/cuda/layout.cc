// Host functions of the device layouts (kernels/cuda/layout.h): built with or without the CUDA Toolkit.
#include "kernels/cuda/layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace frost::cuda {

const char* kv_format_name(KvFormat f) {
  switch (f) {
    case KvFormat::kF32: return "fp32";
    case KvFormat::kF16: return "fp16";
    case KvFormat::kBF16: return "bf16";
    case KvFormat::kInt8: return "int8";
    case KvFormat::kInt4: return "int4";
  }
  return "?";
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kInt8: return "int8";
  }
  return "?";
}

AttentionSplit attention_split(int max_positions, int n_rows, int n_head_kv, int target_blocks) {
  // Enough pieces that rows × kv heads × pieces reaches target_blocks (short sequences at small batch still
  // fill the GPU), pieces of at least 16 positions; lengths and counts are powers of two, so that a decode
  // replays the same few CUDA graphs while its context grows.
  const int64_t row_heads = std::max<int64_t>(1, static_cast<int64_t>(n_rows) * n_head_kv);
  const int64_t want = std::max<int64_t>(1, (target_blocks + row_heads - 1) / row_heads);
  AttentionSplit a;
  a.split_len = 16;
  while (a.split_len < kAttnMaxSplit && (a.split_len * want < max_positions ||
                                         (max_positions + a.split_len - 1) / a.split_len > kAttnSplits))
    a.split_len *= 2;
  const int need = (max_positions + a.split_len - 1) / a.split_len;
  if (need > kAttnSplits)
    throw std::invalid_argument("attention: " + std::to_string(max_positions) + " positions exceed the " +
                                std::to_string(kAttnSplits * kAttnMaxSplit) + " the CUDA attention holds");
  a.n_splits = 1;
  while (a.n_splits < need) a.n_splits *= 2;
  return a;
}

}  // namespace frost::cuda
