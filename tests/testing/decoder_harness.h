#pragma once
// Shared pieces of the device decoder tests (tests/unit/exec on the host reference device, tests/gpu on the
// CUDA decoder): small random frost models, a block allocator, sequences that take blocks as they grow, and
// the relative error the tolerances are stated in.
#include <memory>
#include <string>
#include <vector>

#include "core/exec/device_decoder.h"
#include "core/model/model_loader.h"

namespace frost::testing {

// LLaMA with GQA (8 query heads over 2 kv heads, head_dim 16), vocab 300, 2 layers, context 64.
ModelConfig device_llama_gqa();
// GPT-2 (4 heads, head_dim 16, biases, LayerNorm, gelu_new), vocab 300, 2 layers, context 64, untied head.
ModelConfig device_gpt2();
// A LoadedModel of `cfg` with deterministic random weights (builtin_models.cc's distribution) in `dtype`
// (fp32, bf16 or fp16 — the matrices in that format; int8 / int4 / w8a8 quantized) and the byte tokenizer.
// A config with the families' tensors (qk_norm, post_norms, a LLaMA-shaped attention_bias / o_bias) gets them
// too, drawn after the plain ones (a plain config's weights do not change).
std::shared_ptr<LoadedModel> random_loaded_model(const ModelConfig& cfg, uint64_t seed,
                                                 WeightDtype dtype = WeightDtype::kF32);

constexpr cuda::KvFormat kKvFormats[] = {cuda::KvFormat::kF32, cuda::KvFormat::kF16, cuda::KvFormat::kBF16,
                                         cuda::KvFormat::kInt8, cuda::KvFormat::kInt4};

// The CPU codec that stores what a device KV format stores (the same rows, the same quantizer).
KvCodecKind kv_codec_of(cuda::KvFormat f);
// The CPU transformer's reference forward of `tokens` in a fresh cache of `codec`: logits [T, V].
std::vector<float> cpu_forward_logits(const LoadedModel& m, KvCodecKind codec,
                                      const std::vector<int32_t>& tokens);

// The device layout of `cfg` in `format`, block_tokens positions per block.
cuda::KvLayout device_layout(const ModelConfig& cfg, cuda::KvFormat format, int block_tokens = 16);
// Allocates a decoder's pool for tests: n_blocks, max_rows, max_seqs, every sequence up to the full context.
void allocate_for_test(DeviceDecoder& d, const ModelConfig& cfg, cuda::KvFormat format, int n_blocks, int max_rows,
                       int max_seqs, int block_tokens = 16);

// A free list of pool blocks.
class TestBlocks {
 public:
  explicit TestBlocks(int n_blocks);
  int take();  // throws when exhausted

 private:
  std::vector<int> free_;
};

// One sequence: its slot, its tokens and the blocks it holds.
struct DecoderSeq {
  int slot = 0;
  std::vector<int32_t> tokens, blocks;
  // Takes blocks until n_positions fit, and sets the slot's table.
  void reserve(DeviceDecoder& d, TestBlocks& a, int n_positions);
};

// Runs a sequence alone: a prefill step (logits of its last prompt token), then greedy decode steps of one row;
// every step's logits [V], n_new steps in all.
std::vector<std::vector<float>> run_alone(DeviceDecoder& d, TestBlocks& a, DecoderSeq s, int n_new, int vocab);

// The logits of every position of `tokens` on slot 0: one prefill step of the first `n_prefill` (logits for each
// row), then one decode step per remaining token; [tokens.size() × V] row-major. The slot's blocks must be set.
std::vector<float> prefill_then_decode_logits(DeviceDecoder& d, const std::vector<int32_t>& tokens, int n_prefill);

// max |a − b| over max(1, max |b|); NaN where the other is not counts as 1e30.
double rel_max_diff(const std::vector<float>& a, const std::vector<float>& b);
int argmax_of(const float* l, int vocab);

}  // namespace frost::testing
