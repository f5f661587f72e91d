#pragma once
// CudaDecoder: the DeviceDecoder (core/exec/device_decoder.h) on one CUDA GPU. Built with FROST_CUDA only.
//
// Weights go from the loaded model (ModelConfig + ModelWeights: frost's one model description) to device
// memory once (CudaWeights) — fp32, or bf16 / fp16 bits as loaded — and every decoder on that GPU borrows
// them; the host copy is not kept. The step is the layer sequence (core/model/layer_sequence.h) over
// kernels/cuda/ops.h and a paged KV pool in device memory; sampling runs on the device
// (kernels/cuda/sample.cu) for every row whose parameters allow it, and only those ids (plus the logits of
// rows the host samples) cross the bus.
//
// Choices written down here:
// - Activations, norms, biases, attention and sampling are fp32; weights fp32, bf16, fp16 or int8 (bf16 /
// fp16:
//   the matrices and the embedding table in that format; a product's activations are rounded to it, nearest
//   even — fp16 overflows to ±inf from 65520 on, IEEE, not saturated —, fp32 accumulation, as cuBLAS computes
//   bf16 × bf16 / fp16 × fp16 → fp32 with CUBLAS_COMPUTE_32F; the GEMV computes the same function).
// - int8 weights (weight-only; model.dtype int8): the CPU int8 model's matrices as it quantized them
//   (LayerWeights::*_q, ModelWeights::lm_head_q: int8 and an fp32 scale per row and group of 32
//   inputs), 1.125 bytes a weight; the embedding table fp32 as loaded (a lookup; the LM head is its own int8
//   matrix, tied or not, as on the CPU). Every product is float(q) · scale (the CPU's dequantized weight, bit
//   for bit) times the fp32 activation, not rounded, summed in fp32. Up to kInt8GemvRows rows: the int8 GEMV,
//   in pieces of kGemvMaxRows rows (a row's result does not depend on the piece, and W is read once a piece:
//   4 × 1.125 bytes a weight at 32 rows against bf16 cuBLAS's 2). Above (prefill): the layer's matrix
//   dequantized into one reused fp32 scratch (the largest matrix's size) and the fp32 cuBLAS GEMM (no TF32) —
//   the same function as the GEMV, summed in another order; the simplest correct path, not a fast one (fp32
//   FMAs and a 4-byte copy of each matrix per step; an int8 tensor-core GEMM would need the activations
//   quantized, which is w8a8, another format).
// - Up to kGemvMaxRows rows a linear layer is the GEMV kernel (W read once with 16-byte loads; LLaMA's
//   RMSNorm and SwiGLU fused into the GEMV that reads them); above, their own kernels and cuBLAS GEMM.
// - CUDA graphs, bounded: a step's rows are padded up to a power of two (padding rows write a spare block no
//   sequence owns and their ids are dropped), its logit rows likewise, so one graph serves every step of the
//   same (rows bucket, logit rows bucket, attention split); at most kMaxGraphs are kept — a step whose shape
//   finds no room runs with direct launches. The per-step metadata and the block tables are copied before
//   the launch (outside the graph), so a replay reads fresh values.
// - Errors: every CUDA / cuBLAS failure becomes DeviceError; sticky ones (kernels/cuda/check.h) mark the
//   decoder unusable, which the executor turns into NOT_SERVING.
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/exec/device_decoder.h"
#include "core/model/layer_sequence.h"
#include "kernels/cuda/ops.h"

namespace frost {

// The model's weights on one GPU (DeviceWeights): uploaded once from the loaded model (or drawn at random for
// benchmarks), shared by every CudaDecoder on that GPU (the engine's, the features'), freed with the last one.
class CudaWeights final : public DeviceWeights {
 public:
  // Uploads the model's weights to GPU `device`. FAILED_PRECONDITION naming what it cannot run
  // (device_supports) or what is missing (no CUDA device, out of device memory with the bytes asked for).
  static absl::StatusOr<std::shared_ptr<const CudaWeights>> create(const ModelConfig& cfg, const ModelWeights& w,
                                                                   int device);
  // Random weights made on the device (benchmarks of shapes with no checkpoint), the distribution of
  // core/model/builtin_models.cc; `weights` fp32, bf16, fp16 or int8 (int8: those weights quantized on the
  // device as the CPU loader quantizes, cuda::quantize_int8, groups of 32). Throws DeviceError.
  static std::shared_ptr<const CudaWeights> random(const ModelConfig& cfg, int device, WeightDtype weights,
                                                   uint64_t seed);
  ~CudaWeights() override;
  CudaWeights(const CudaWeights&) = delete;
  CudaWeights& operator=(const CudaWeights&) = delete;

  struct Linear {
    const void* w = nullptr;
    const float* b = nullptr;
    int n_out = 0, n_in = 0;
    const float* scales = nullptr;  // int8: [n_out, ceil(n_in / group)]
    int group = 0;
  };
  struct Layer {
    const float *attn_norm_w = nullptr, *attn_norm_b = nullptr, *mlp_norm_w = nullptr, *mlp_norm_b = nullptr;
    Linear qkv, o, in, out;
  };
  cuda::DType wdt = cuda::DType::kF32;
  cuda::DType edt = cuda::DType::kF32;  // the embedding table's (int8 models: fp32)
  bool llama = true;
  std::string card;
  int n_sms = 1;
  int64_t device_total = 0;
  int64_t allocated = 0;  // every byte these weights hold on the device (the RoPE tables too)
  const void* tok_embed = nullptr;
  const float* pos_embed = nullptr;
  const float *final_norm_w = nullptr, *final_norm_b = nullptr;
  Linear lm_head;
  std::vector<Layer> layers;
  const float *rope_cos = nullptr, *rope_sin = nullptr;

 private:
  CudaWeights(const ModelConfig& cfg, int device, cuda::DType wdt);
  void init();
  void* alloc(int64_t bytes, const char* what);
  const float* upload_f32(const at::Tensor& t, const char* what);
  const void* upload_w(const at::Tensor& t, const char* what);
  Linear upload_q8(const kernels::QuantizedMatrix& q, const at::Tensor& bias, const char* what);
  void upload(const ModelWeights& w);
  void draw(uint64_t seed);
  std::vector<void*> allocations_;
};

class CudaDecoder final : public DeviceDecoder {
 public:
  static constexpr int kMaxGraphs = 96;
  static constexpr int kMaxGraphRows = 512;  // steps with more rows run with direct launches
  static constexpr int kInt8GemvRows = 32;   // int8: the GEMV (in pieces) up to these rows, then the GEMM

  // A decoder (stream, cuBLAS, later its pool and buffers) over weights on their GPU (core/exec/device_factory.h
  // makes both). FAILED_PRECONDITION when the GPU cannot make one.
  static absl::StatusOr<std::unique_ptr<CudaDecoder>> create(std::shared_ptr<const CudaWeights> weights,
                                                             const DeviceOptions& opts);
  // Benchmarks: CudaWeights::random and a decoder over them. Throws DeviceError.
  static std::unique_ptr<CudaDecoder> random(const ModelConfig& cfg, const DeviceOptions& opts, WeightDtype weights,
                                             uint64_t seed);
  ~CudaDecoder() override;
  CudaDecoder(const CudaDecoder&) = delete;
  CudaDecoder& operator=(const CudaDecoder&) = delete;

  void allocate(const cuda::KvLayout& layout, int n_blocks, int max_rows, int max_seqs, int max_blocks) override;
  const cuda::KvLayout& kv_layout() const override { return kv_; }
  void set_blocks(int seq, const int32_t* blocks, int n) override;
  void set_masks(const uint32_t* words, int n_rows) override;
  int forward(const DeviceStep& step, const std::vector<cuda::SampleParams>& sampling, int32_t* ids,
              float* host_logits) override;
  std::vector<float> forward_logits(const DeviceStep& step) override;
  std::vector<float> forward_hidden(const DeviceStep& step) override;
  DeviceMemory memory() const override;

  const ModelConfig& config() const { return cfg_; }
  int64_t weight_bytes() const { return w_->bytes(); }
  int graphs_captured() const { return static_cast<int>(graphs_.size()); }
  // Per-stage device time (CUDA events between the stages of a step; steps then run without graphs), summed
  // over steps since the last take: [(stage, ms)] in step order ("qkv", "attention", … over all layers).
  void set_profiling(bool on) { profiling_ = on; }
  std::vector<std::pair<std::string, double>> take_profile();

 private:
  using Linear = CudaWeights::Linear;
  using Layer = CudaWeights::Layer;
  struct Ops;  // the layer sequence's ops (cuda_decoder.cc)

  CudaDecoder(std::shared_ptr<const CudaWeights> w, const DeviceOptions& opts)
      : w_(std::move(w)), cfg_(w_->config()), opts_(opts), wdt_(w_->wdt), llama_(w_->llama) {}
  void init_stream();
  void release();
  void* alloc(int64_t bytes, const char* what);
  // Copies the step's metadata up; returns the (rows, logit rows) the kernels run, padded when graphs are on.
  std::pair<int, int> stage(const DeviceStep& step, const std::vector<cuda::SampleParams>* sampling, bool pad,
                            bool hidden);
  void enqueue(int n_rows, int n_logits, StepOutput out);
  void run(int n_rows, int n_logits, StepOutput out);
  void linear(const Linear& L, const float* x, int rows, float* y, bool accumulate,
              cuda::GemvInput in = cuda::GemvInput::kPlain, const float* norm_w = nullptr, float* scratch = nullptr);
  void norm(const float* x, const float* w, const float* b, int rows, float* out);
  [[noreturn]] void fail(const std::exception& e);
  void mark(const char* stage);
  void collect_profile();

  std::shared_ptr<const CudaWeights> w_;
  const ModelConfig& cfg_;
  DeviceOptions opts_;
  cuda::DType wdt_;
  bool llama_ = true;
  int64_t device_bytes_ = 0;  // this decoder's own allocations (the weights' are theirs)
  std::vector<void*> allocations_;
  cudaStream_t stream_ = nullptr;
  void* cublas_ = nullptr;  // cublasHandle_t
  bool broken_ = false;     // a sticky error was seen

  // KV pool (n_blocks_ + 1 blocks: the last is the padding rows' spare) and step buffers
  cuda::KvLayout kv_;
  // rows_cap_: rows a step may run (padded); logits_cap_: sampled rows (padded); logit_rows_cap_: rows of
  // logits forward_logits may ask for (hidden states: up to the rows).
  DeviceLimits lim_;
  int rows_cap_ = 0, logits_cap_ = 0, logit_rows_cap_ = 0;
  uint8_t* pool_ = nullptr;
  float *x_ = nullptr, *h_ = nullptr, *qkv_ = nullptr, *att_ = nullptr, *gu_ = nullptr, *act_ = nullptr,
        *logits_ = nullptr, *probs_ = nullptr, *attn_part_ = nullptr;
  uint16_t* xb_ = nullptr;  // bf16 / fp16 activations for the 2-byte GEMM
  float* wscratch_ = nullptr;  // int8: a matrix dequantized for the GEMM (steps above kInt8GemvRows rows)
  int32_t* ids_ = nullptr;

  // per-step metadata: a pinned host block and its device copy (same layout); the block tables after it
  int64_t meta_bytes_ = 0, off_params_ = 0, off_table_ = 0, off_masks_ = 0;  // masks: cuda_decoder_masks.cc
  uint8_t* meta_host_ = nullptr;
  uint8_t* meta_dev_ = nullptr;
  int32_t* ids_host_ = nullptr;
  cuda::StepRows rows_dev_;
  int32_t* logit_rows_dev_ = nullptr;
  cuda::SampleParams* params_dev_ = nullptr;
  int n_table_rows_ = 0;  // table rows set for the next step (copied up to this one)
  cuda::AttentionSplit split_;
  std::map<std::tuple<int, int, int, int>, cudaGraphExec_t> graphs_;  // (rows, logit rows, split) → step

  bool profiling_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> event_stage_;
  size_t events_used_ = 0;
  std::vector<std::pair<std::string, double>> profile_;
};

}  // namespace frost
