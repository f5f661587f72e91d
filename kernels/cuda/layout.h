#pragma once
// The device decoder's data layouts, shared by the CUDA kernels (kernels/cuda/ops.h), their CPU twins
// (kernels/cuda/reference.h) and the host reference device (core/exec/reference_decoder.h). Plain C++: no
// CUDA header, so the twins and the reference device build (and run in CI) without the CUDA Toolkit.
//
// Paged KV: a pool of blocks of `block_tokens` positions; sequence slot s's position p lives in block
// block_table[s * max_blocks + p / block_tokens], row p % block_tokens. Block b of layer l starts at
// pool + (b * n_layer + l) * layer_block_bytes; inside it: K rows [Hkv, bt, row_bytes], V rows (same), then
// (int8 / int4) K scales [Hkv, bt] fp32 and V scales [Hkv, bt] fp32.
#include <cstdint>

#ifdef __CUDACC__
#define FROST_HD __host__ __device__
#else
#define FROST_HD
#endif

namespace frost::cuda {

// Weight storage. bf16 / fp16: the matrices (and the embedding table) in 2 bytes, read as fp32; their
// products take the activations rounded to the same format (ops.h gemv), accumulating in fp32.
// int8 (weight-only): the matrices as the CPU int8 model quantizes them (kernels/cpu/quant.h quantize_int8:
// int8 [n_out, n_in] and an fp32 scale per output row and group of `group` inputs, [n_out, ceil(n_in /
// group)]), read as float(q) · scale — the CPU's dequantize(), the same fp32 values — times fp32
// activations (not rounded), accumulating in fp32; the embedding table stays fp32 (a lookup, as on the CPU).
enum class DType { kF32, kBF16, kF16, kInt8 };
FROST_HD inline int dtype_bytes(DType d) { return d == DType::kF32 ? 4 : d == DType::kInt8 ? 1 : 2; }
const char* dtype_name(DType d);                          // "fp32" | "bf16" | "fp16" | "int8"
enum class KvFormat { kF32, kF16, kBF16, kInt8, kInt4 };  // KV storage (frost's codec names)

const char* kv_format_name(KvFormat f);  // "fp32" | "fp16" | "bf16" | "int8" | "int4"
// Bytes of one head row of D values (without its scale).
FROST_HD inline int64_t kv_row_bytes(KvFormat f, int64_t d) {
  return f == KvFormat::kF32 ? 4 * d : f == KvFormat::kInt8 ? d : f == KvFormat::kInt4 ? d / 2 : 2 * d;
}
FROST_HD inline bool kv_has_scales(KvFormat f) { return f == KvFormat::kInt8 || f == KvFormat::kInt4; }

// Where one layer's K / V rows and scales sit in the pool (see above).
struct KvLayout {
  KvFormat format = KvFormat::kF32;
  int n_layer = 0, n_head_kv = 0, head_dim = 0, block_tokens = 16;
  FROST_HD int64_t row_bytes() const { return kv_row_bytes(format, head_dim); }
  FROST_HD int64_t rows_bytes() const { return static_cast<int64_t>(n_head_kv) * block_tokens * row_bytes(); }
  FROST_HD int64_t scales_bytes() const {
    return kv_has_scales(format) ? static_cast<int64_t>(n_head_kv) * block_tokens * 4 : 0;
  }
  FROST_HD int64_t layer_block_bytes() const { return 2 * rows_bytes() + 2 * scales_bytes(); }
  FROST_HD int64_t block_bytes() const { return n_layer * layer_block_bytes(); }
  // Bytes one position takes in every layer (K + V rows and their scales), without block rounding.
  FROST_HD int64_t bytes_per_token() const {
    return static_cast<int64_t>(n_layer) * 2 * n_head_kv * (row_bytes() + (kv_has_scales(format) ? 4 : 0));
  }
};

// The attention's split of a row's positions into pieces (flash-decoding), merged by an online softmax.
constexpr int kAttnSplits = 64, kAttnMaxSplit = 256;  // up to 16,384 positions
struct AttentionSplit {
  int split_len = 32, n_splits = 1;
};
// The split for a step of n_rows whose longest row attends to max_positions: pieces (≥ 16 positions, a power
// of two) enough for n_rows · n_head_kv · pieces to reach target_blocks (a few per multiprocessor), their
// count rounded up to a power of two (so a growing context replays a handful of CUDA graphs). Throws
// std::invalid_argument past kAttnSplits · kAttnMaxSplit positions.
AttentionSplit attention_split(int max_positions, int n_rows, int n_head_kv, int target_blocks);

// How one logits row becomes a token on the device: the host sampler's parameters (core/generate/sampler.h)
// and the uniform draw of the sequence's own generator. Greedy: argmax, ties → lowest id.
struct SampleParams {
  int32_t greedy = 1;        // 1: argmax
  int32_t top_k = 0;         // 0 = off
  float temperature = 1.0f;
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  int32_t to_host = 0;       // 1: the host samples this row (its logits are copied back; the device skips it)
  int32_t masked = 0;        // 1: only the tokens of this row's mask (DeviceDecoder::set_masks) may be drawn
  double u = 0.0;            // in [0, 1)
};

}  // namespace frost::cuda
