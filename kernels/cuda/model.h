#pragma once
// A LLaMA- or GPT-2-family decoder resident on one CUDA device: weights uploaded once, a paged KV block pool
// in device memory, one ragged batch of rows per step (decode tokens and prefill chunks alike), sampling on
// the device so that only the chosen ids cross the bus. No LibTorch: the host hands it plain fp32 arrays in
// frost's fused layout (core/model/transformer.h LayerWeights: wqkv = [q; k; v], LLaMA w_in = [gate; up]);
// core/model/cuda_weights.h makes them from a loaded model.
//
// Its reference is the CPU path: tests/gpu/ holds it to a plain C++ forward (kernels/cuda/reference.h) on
// random LLaMA (GQA) and GPT-2 shapes with every KV format, and to the CPU golden of stories260K.
//
// Choices written down here:
// - Activations, norms, biases, attention and sampling are fp32; weights fp32 or bf16 (bf16: activations are
//   rounded to bf16 for the GEMM, fp32 accumulation, as cuBLAS computes bf16 × bf16 → fp32).
// - Up to kGemvMaxRows rows a linear layer is the GEMV kernel (W read once with 16-byte loads; LLaMA's
// RMSNorm
//   and SwiGLU fused into the GEMV that reads them); above, their own kernels and cuBLAS GEMM.
//   `ModelOptions::gemv = false` forces cuBLAS everywhere.
// - With `cuda_graphs`, the step for a given (rows, logit rows, attention split) is captured once and
//   replayed: every kernel reads its per-row metadata from device memory, refreshed by a copy inside the
//   graph; the split's sizes are powers of two, so a growing context replays a handful of graphs.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/ops.h"

namespace frost::cuda {

enum class Arch { kLlama, kGpt2 };

struct ModelSpec {
  Arch arch = Arch::kLlama;
  int n_vocab = 0, dim = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, ffn_dim = 0, max_pos = 0;
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  bool tie_embeddings = true;
  int q_dim() const { return n_head * head_dim; }
  int kv_dim() const { return n_head_kv * head_dim; }
  int64_t n_params() const;  // weights of the model (tied head counted once)
};

// fp32 host arrays; biases and GPT-2-only tensors are null for LLaMA. lm_head null = tied to tok_embed.
struct HostLayer {
  const float *attn_norm_w = nullptr, *attn_norm_b = nullptr, *wqkv = nullptr, *bqkv = nullptr, *wo = nullptr,
              *bo = nullptr, *mlp_norm_w = nullptr, *mlp_norm_b = nullptr, *w_in = nullptr, *b_in = nullptr,
              *w_out = nullptr, *b_out = nullptr;
};
struct HostWeights {
  const float* tok_embed = nullptr;  // [V, C]
  const float* pos_embed = nullptr;  // [max_pos, C] (GPT-2)
  std::vector<HostLayer> layers;
  const float *final_norm_w = nullptr, *final_norm_b = nullptr;
  const float* lm_head = nullptr;  // [V, C]
};

struct ModelOptions {
  int device = 0;
  DType weights = DType::kF32;
  KvFormat kv = KvFormat::kF32;
  int block_tokens = 16;
  int n_blocks = 0;    // KV pool blocks; 0 = max_seqs · max_blocks (every sequence at full context)
  int max_rows = 256;  // rows (tokens) per step
  int max_seqs = 256;  // sequence slots with a block table
  bool gemv = true;    // the GEMV kernel for ≤ kGemvMaxRows rows (false: cuBLAS always)
  bool cuda_graphs = false;
};

// Sampling of one logit row: temperature 0 = greedy; u = the host generator's uniform draw in [0, 1).
struct RowSampling {
  float temperature = 0.f, min_p = 0.f;
  double u = 0.0;
};

// Host-side free list of pool blocks (the engine's allocator on the CPU path does the same bookkeeping).
class BlockAllocator {
 public:
  explicit BlockAllocator(int n_blocks);
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int alloc();  // −1 when none is free
  void release(int b);

 private:
  std::vector<int> free_;
  std::vector<bool> used_;
};

class Model {
 public:
  // Uploads the host weights (fp32 → opts.weights) and allocates the pool. Throws std::runtime_error naming
  // what is missing: no device, out of device memory (with the bytes asked for), a shape it cannot run.
  Model(const ModelSpec& spec, const HostWeights& w, const ModelOptions& opts);
  // Random weights made on the device (benchmarks of shapes with no checkpoint): the distribution of
  // core/model/builtin_models.cc (uniform, std 1/√n_in for matrices, 0.05 for embeddings, norms 1 ± 0.1).
  static std::unique_ptr<Model> random(const ModelSpec& spec, const ModelOptions& opts, uint64_t seed);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // One step. Row r = (token[r], seq[r], pos[r]); logits are computed for the rows listed in logit_rows
  // (in that order). Every position a row attends to must have been written (this step's earlier rows of the
  // same sequence count) and its block set with set_blocks.
  struct Step {
    std::vector<int32_t> token, seq, pos, logit_rows;
  };
  void set_blocks(int seq, const std::vector<int32_t>& blocks);
  // Runs the step and returns the logits [logit_rows, V] copied to the host.
  std::vector<float> forward_logits(const Step& step);
  // Runs the step and samples each logit row on the device; returns the ids.
  std::vector<int32_t> forward_sample(const Step& step, const std::vector<RowSampling>& sampling);
  // forward_sample with greedy for every row.
  std::vector<int32_t> forward_greedy(const Step& step);

  const ModelSpec& spec() const { return spec_; }
  const KvLayout& kv_layout() const { return kv_; }
  int n_blocks() const { return n_blocks_; }
  int max_blocks_per_seq() const { return max_blocks_; }
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t kv_pool_bytes() const { return kv_.block_bytes() * n_blocks_; }
  int64_t device_bytes() const { return device_bytes_; }  // everything this model allocated
  int graphs_captured() const { return static_cast<int>(graphs_.size()); }

  // Per-stage device time (CUDA events between the stages of a step; steps then run without graphs), summed
  // over steps since the last take: [(stage, ms)] in step order ("qkv", "attention", … over all layers).
  void set_profiling(bool on) { profiling_ = on; }
  std::vector<std::pair<std::string, double>> take_profile();

 private:
  struct Linear {
    const void* w = nullptr;
    const float* b = nullptr;
    int n_out = 0, n_in = 0;
  };
  struct Layer {
    const float *attn_norm_w = nullptr, *attn_norm_b = nullptr, *mlp_norm_w = nullptr, *mlp_norm_b = nullptr;
    Linear qkv, o, in, out;
  };

  Model(const ModelSpec& spec, const ModelOptions& opts);  // allocates everything; weights not set
  void init();
  void release();
  void* alloc(int64_t bytes, const char* what);
  const float* upload_f32(const float* host, int64_t n, const char* what);
  const void* upload_w(const float* host, int64_t n, const char* what);
  void validate() const;
  void stage(const Step& step, const std::vector<RowSampling>* sampling);
  void enqueue(int n_rows, int n_logits, int mode);  // mode 0 logits, 1 sample
  void run(int n_rows, int n_logits, int mode);
  // y (+)= L(x̃): the GEMV (x̃ formed inside it: in, norm_w) up to kGemvMaxRows rows, else the transform's
  // own kernel into `scratch` and cuBLAS.
  void linear(const Linear& L, const float* x, int rows, float* y, bool accumulate,
              GemvInput in = GemvInput::kPlain, const float* norm_w = nullptr, float* scratch = nullptr);
  void norm(const float* x, const float* w, const float* b, int rows, float* out);

  ModelSpec spec_;
  ModelOptions opts_;
  KvLayout kv_;
  int n_blocks_ = 0, max_blocks_ = 0, n_sms_ = 1;
  int64_t weight_bytes_ = 0, device_bytes_ = 0;
  std::vector<void*> allocations_;
  cudaStream_t stream_ = nullptr;
  void* cublas_ = nullptr;  // cublasHandle_t
  void* cublas_ws_ = nullptr;

  // weights
  const void* tok_embed_ = nullptr;
  const float* pos_embed_ = nullptr;
  const float *final_norm_w_ = nullptr, *final_norm_b_ = nullptr;
  Linear lm_head_;
  std::vector<Layer> layers_;
  const float *rope_cos_ = nullptr, *rope_sin_ = nullptr;

  // KV pool and activations
  uint8_t* pool_ = nullptr;
  float *x_ = nullptr, *h_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *gu_ = nullptr, *act_ = nullptr,
        *logits_ = nullptr;
  uint16_t* xb_ = nullptr;  // bf16 activations for the bf16 GEMM
  int32_t* ids_ = nullptr;

  // per-step metadata: one pinned host block and its device copy (same layout)
  int64_t meta_bytes_ = 0;
  uint8_t* meta_host_ = nullptr;
  uint8_t* meta_dev_ = nullptr;
  int32_t* ids_host_ = nullptr;
  int32_t* table_host_ = nullptr;  // the block tables [max_seqs, max_blocks], inside meta_host_
  StepRows rows_dev_;
  float *temp_dev_ = nullptr, *minp_dev_ = nullptr;
  double* u_dev_ = nullptr;
  int32_t* logit_rows_dev_ = nullptr;

  float* attn_part_ = nullptr;  // attention split partials (attention_partials_floats)
  AttentionSplit split_;        // this step's
  std::map<std::tuple<int, int, int, int>, cudaGraphExec_t> graphs_;  // (rows, logit rows, split) → step

  void mark(const char* stage);
  void collect_profile();
  bool profiling_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> event_stage_;
  size_t events_used_ = 0;
  std::vector<std::pair<std::string, double>> profile_;
};

}  // namespace frost::cuda
