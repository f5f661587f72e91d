#pragma once
// DeviceDecoder: a LLaMA- or GPT-2-family decoder resident on a device — weights uploaded once from frost's
// own model description (ModelConfig + ModelWeights: no second architecture enum), a paged KV block pool in
// the device's memory (kernels/cuda/layout.h), one ragged batch of rows per step (decode tokens and prefill
// chunks alike), sampling on the device so that only the chosen ids cross the bus (rows that need the host
// sampler get their logits copied back). DeviceExecutor (core/exec/device_executor.h) drives one.
//
// Two implementations with the same contract, each a backend of the one layer sequence
// (core/model/layer_sequence.h: the order of a step is written there, not here):
//   CudaDecoder      (core/exec/cuda_decoder.h, FROST_CUDA)  the GPU: kernels/cuda/ops.h and cuBLAS
//   ReferenceDecoder (core/exec/reference_decoder.h)         the host twin: the same layout and the same
//                                                            functions in plain C++ (kernels/cuda/reference.h),
//                                                            so every test of the wiring runs without a GPU
//
// Weights once per device (llama.cpp's context borrowing `const llama_model&`): a model's weights are laid out
// on a device once, as a DeviceWeights, and every decoder made on that device — the engine's, and the one
// Predict's and the jobs' features run on (core/exec/hidden_states.h) — borrows them (shared_ptr); a decoder
// owns only its KV pool, step buffers and stream. core/exec/device_factory.h is the one place both are made.
//
// Not thread-safe: one thread (the engine's) drives a decoder. Errors are thrown as DeviceError.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/common/device_spec.h"
#include "core/model/layer_sequence.h"
#include "core/model/model_config.h"
#include "core/model/transformer.h"
#include "kernels/cuda/layout.h"

namespace frost {

// What a device decoder runs, checked before anything is uploaded: FAILED_PRECONDITION naming what it does
// not (architecture variants, int4 / w8a8 weights — fp32, bf16, fp16 and int8 run —, another activation than
// the family's, head_dim, query heads per kv head, context), "model.device <name>: ..." in front. `have`: the
// layer sequence's features the device runs beyond the plain layer (the reference device: the families'; the
// CUDA decoder: none, so a model that needs one is refused naming its config.json field).
absl::Status device_supports(const ModelConfig& cfg, WeightDtype dtype, const std::string& device,
                             const LayerFeatures& have = LayerFeatures{});
// The RoPE table a device reads (core/model/rope.h's make_rope_table, the CPU's): cos / sin [max_pos,
// rot_dim / 2] fp32 of the global rotation (rope_theta, rope_scaling), or (local) Gemma 3's sliding layers'
// (rope_local_base_freq, unscaled).
void device_rope_table(const ModelConfig& cfg, bool local, std::vector<float>* cos_t,
                       std::vector<float>* sin_t);
// An int8 model (w.dtype kInt8) must carry the int8 form of every matrix it multiplies (LayerWeights::*_q,
// ModelWeights::lm_head_q, 8 bits): FAILED_PRECONDITION naming the matrix otherwise; OK for other formats.
absl::Status device_int8_weights_present(const ModelWeights& w, const std::string& device);
// How a device stores a model's matrices and embedding table: bf16 and fp16 as themselves, fp32 as fp32, int8
// as the CPU int8 model's int8 matrices and scales (its embedding table fp32, as loaded; only the formats
// device_supports accepts reach a device).
cuda::DType device_weight_dtype(WeightDtype dtype);

// A model's weights as one device lays them out, made once (device_factory.h: upload_device_weights) and
// shared by the decoders of that device. Immutable once made.
class DeviceWeights {
 public:
  virtual ~DeviceWeights() = default;
  const ModelConfig& config() const { return cfg_; }
  DeviceSpec device() const { return device_; }
  // The bytes the device holds for them (frost_model_weight_bytes / frost_device_memory_bytes{kind="weights"}).
  int64_t bytes() const { return bytes_; }

 protected:
  DeviceWeights(const ModelConfig& cfg, DeviceSpec device) : cfg_(cfg), device_(device) {}
  ModelConfig cfg_;
  DeviceSpec device_;
  int64_t bytes_ = 0;
};

// A decoder failure. sticky: the device is unusable from now on (a CUDA context that saw an illegal address or
// a launch failure); the executor then refuses every further step.
class DeviceError : public std::runtime_error {
 public:
  DeviceError(const std::string& what, bool sticky) : std::runtime_error(what), sticky_(sticky) {}
  bool sticky() const { return sticky_; }

 private:
  bool sticky_;
};

struct DeviceOptions {
  int device = 0;                          // CUDA ordinal
  cuda::KvFormat kv = cuda::KvFormat::kF32;  // the pool's one KV format
  bool gemv = true;                        // GEMV kernels for steps of few rows (else cuBLAS)
  bool cuda_graphs = true;                 // replay captured steps (bucketed shapes)
};

// One step: row r = (token[r], slot seq[r], position pos[r]); logits are computed for logit_rows (in that
// order). Every position a row attends to must have been written (this step's earlier rows of the same
// sequence count) and its block set with set_blocks.
struct DeviceStep {
  std::vector<int32_t> token, seq, pos, logit_rows;
};

struct DeviceMemory {
  std::string name;              // "cuda:0 (NVIDIA H100 80GB HBM3)", "reference (host)"
  int64_t weight_bytes = 0;      // the weights as the device reads them
  int64_t kv_pool_bytes = 0;     // the KV pool
  int64_t device_bytes = 0;      // everything this decoder allocated on its device
  int64_t device_total_bytes = 0;  // the device's memory
  int64_t device_free_bytes = 0;   // free now (0 when unknown)
  int32_t graphs = 0;            // CUDA graphs captured
};

// The one step check of every device decoder (device_decoder.cc); each throws DeviceError(who + ": ...").
struct DeviceLimits {
  int n_blocks = 0, max_rows = 0, max_seqs = 0, max_blocks = 0;
  bool allocated() const { return max_rows > 0; }
};
// allocate()'s arguments against the model and the decoder's KV format.
void check_device_allocation(const ModelConfig& cfg, cuda::KvFormat format, const cuda::KvLayout& layout,
                             const DeviceLimits& limits, const DeviceLimits& before, const char* who);
// set_blocks()'s: slot, count and every block id.
void check_device_blocks(const DeviceLimits& limits, int seq, const int32_t* blocks, int n, const char* who);
// A step: rows 1..max_rows, one token / slot / position per row, each in range, 1..max_logit_rows logit rows
// naming rows of the step.
void check_device_step(const ModelConfig& cfg, const DeviceLimits& limits, int block_tokens, int max_logit_rows,
                       const DeviceStep& step, const char* who);

class DeviceDecoder {
 public:
  virtual ~DeviceDecoder() = default;

  // Allocates the KV pool (n_blocks blocks of `layout`, whose format must be the options') and the step
  // buffers (max_rows rows, max_seqs block-table slots of max_blocks blocks); once, before any step.
  virtual void allocate(const cuda::KvLayout& layout, int n_blocks, int max_rows, int max_seqs,
                        int max_blocks) = 0;
  virtual const cuda::KvLayout& kv_layout() const = 0;
  // The block table of slot `seq` for the next step (n ≤ max_blocks blocks, each < n_blocks).
  virtual void set_blocks(int seq, const int32_t* blocks, int n) = 0;
  // Constrained decoding: the token masks of the next forward()'s logit rows — row i's ceil(V / 32) words
  // (core/constrain/token_mask.h's layout) at words + i · ceil(V / 32), n_rows ≤ max_seqs — read for the rows
  // whose sampling[i].masked is set: a token whose bit is clear is never drawn there (its logit is -inf
  // before the sampling). Copied; holds for one forward().
  virtual void set_masks(const uint32_t* words, int n_rows) = 0;
  // Runs one step. For logit row i: sampling[i].to_host == 0 → ids[i] = the token sampled on the device;
  // else ids[i] = -1 and the row's logits [V] are copied to host_logits (rows in the order of the to_host
  // entries). Returns the number of rows copied.
  virtual int forward(const DeviceStep& step, const std::vector<cuda::SampleParams>& sampling, int32_t* ids,
                      float* host_logits) = 0;
  // The logits [logit rows, V] of a step, all copied back (tests, the twin's comparisons).
  virtual std::vector<float> forward_logits(const DeviceStep& step) = 0;
  // The final-norm hidden states [logit rows, C] of a step, copied back, no lm_head (Predict's backbone
  // features). Any number of logit rows up to the step's rows.
  virtual std::vector<float> forward_hidden(const DeviceStep& step) = 0;
  virtual DeviceMemory memory() const = 0;
};

}  // namespace frost
