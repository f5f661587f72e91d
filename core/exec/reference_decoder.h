#pragma once
// ReferenceDecoder: the host "reference device" — a DeviceDecoder (core/exec/device_decoder.h) that runs on
// the CPU with the device's KV layout (kernels/cuda/layout.h: the pool, block tables, slot mapping) and the
// device's functions: the CPU twins of the CUDA kernels (kernels/cuda/reference.h, sums in double) and the
// device sampler's twin. Through DeviceExecutor it runs in the real engine and scheduler, so preemption,
// prefix caching, cancellation, mixed sampling and the device's refusals are tested without a GPU (CI);
// on a GPU, tests/gpu holds the CUDA decoder to it step for step.
//
// It runs the model families' features too (ModelConfig::plain(); LayerFeatures::families): RoPE scaling and
// partial rotary from the CPU's tables (make_rope_table), sliding windows, soft caps, q / k norms, post norms,
// scaled embeddings and queries, the tanh-GELU gate, q / k / v biases without an o bias — ahead of the CUDA
// decoder, which refuses such a model naming its config.json field until it has the kernels.
//
// Slow by design (plain loops in double): meant for small models (stories260K, builtin:tiny).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/exec/device_decoder.h"

namespace frost {

// The weights as the reference device holds them (made once by upload_device_weights, shared by its decoders):
// fp32 values (bf16 / fp16 models are computed as the device does: bf16 / fp16 weights times inputs rounded to
// the same format, nearest even, bit for bit the device's rounding; int8 models keep the CPU int8 model's int8
// matrices and scales, ref::linear_q8, the embedding table fp32).
class ReferenceWeights final : public DeviceWeights {
 public:
  // FAILED_PRECONDITION (device_supports) for a model a device decoder does not run.
  static absl::StatusOr<std::shared_ptr<const ReferenceWeights>> create(const ModelConfig& cfg, const ModelWeights& w);

  // A matrix as the device stores it: fp32 values (fp32 / bf16 / fp16 models: ref::linear rounds them), or
  // (int8) the quantized values and scales.
  struct Matrix {
    std::vector<float> f;
    std::vector<int8_t> q;
    std::vector<float> scales;
    int group = 0;
  };
  struct Layer {
    std::vector<float> attn_norm_w, attn_norm_b, bqkv, bo, mlp_norm_w, mlp_norm_b, b_in, b_out;
    std::vector<float> q_norm_w, k_norm_w, post_attn_norm_w, post_mlp_norm_w;  // the families' (or empty)
    Matrix wqkv, wo, w_in, w_out;
  };
  cuda::DType wdt = cuda::DType::kF32;  // how the device stores the matrices
  std::vector<float> tok_embed, pos_embed, final_norm_w, final_norm_b;
  Matrix lm_head;  // empty (fp32 / bf16 / fp16 models): tied to tok_embed
  std::vector<Layer> layers;
  // LLaMA-shaped: the RoPE tables [max_pos, rot_dim / 2] (device_rope_table, the CPU's make_rope_table): [0]
  // global, [1] Gemma 3's local rotation of the sliding layers (present when rope_local_base_freq is set).
  std::vector<float> rope_cos[2], rope_sin[2];

 private:
  explicit ReferenceWeights(const ModelConfig& cfg) : DeviceWeights(cfg, DeviceSpec{DeviceKind::kReference, 0}) {}
};

class ReferenceDecoder final : public DeviceDecoder {
 public:
  // A decoder over weights already laid out (core/exec/device_factory.h makes both).
  ReferenceDecoder(std::shared_ptr<const ReferenceWeights> w, const DeviceOptions& opts)
      : w_(std::move(w)), cfg_(w_->config()), opts_(opts) {}

  void allocate(const cuda::KvLayout& layout, int n_blocks, int max_rows, int max_seqs, int max_blocks) override;
  const cuda::KvLayout& kv_layout() const override { return kv_; }
  void set_blocks(int seq, const int32_t* blocks, int n) override;
  void set_masks(const uint32_t* words, int n_rows) override;
  int forward(const DeviceStep& step, const std::vector<cuda::SampleParams>& sampling, int32_t* ids,
              float* host_logits) override;
  std::vector<float> forward_logits(const DeviceStep& step) override;
  std::vector<float> forward_hidden(const DeviceStep& step) override;
  DeviceMemory memory() const override;

  // Tests: the next forward() throws DeviceError(sticky) — what a lost CUDA context does — and so does every
  // later one when sticky.
  void inject_fault(bool sticky) { fault_ = sticky ? 2 : 1; }

 private:
  struct Ops;  // the layer sequence's ops (reference_decoder.cc)
  // logits [logit rows, V], or (hidden) the final-norm rows [logit rows, C]
  std::vector<float> run(const DeviceStep& step, bool hidden = false);
  uint8_t* block_base(int seq, int pos, int layer, int* row);
  void linear(const ReferenceWeights::Matrix& m, const float* x, int rows, int n_out, int n_in, const float* b,
              bool accumulate, float* y) const;

  std::shared_ptr<const ReferenceWeights> w_;
  const ModelConfig& cfg_;
  DeviceOptions opts_;
  cuda::KvLayout kv_;
  DeviceLimits lim_;
  std::vector<uint8_t> pool_;
  std::vector<int32_t> table_;  // [max_seqs, max_blocks]
  std::vector<uint32_t> masks_;  // set_masks(): [rows, ceil(V / 32)] for the next forward()
  std::vector<float> masked_;    // a masked row's logits (scratch)
  int fault_ = 0;               // 1: fail the next step; 2: fail every step (sticky)
};

}  // namespace frost
