#pragma once
// Transformer: embed → blocks → final norm → lm_head, for the LLaMA and GPT-2 families.
//
// Letters: T = new tokens, S = cached tokens after the step, V = vocab, C = dim,
// H = query heads, Hkv = kv heads, D = head_dim, F = ffn_dim.
//
// Two forwards, and tests hold them to each other:
//  * forward_batch(): the serving step — the layer sequence (core/model/layer_sequence.h, written once for every
//    backend) over the CPU's ops: packed GEMMs over a ragged batch of rows, attention per row through its
//    sequence's KV codec, no LibTorch op per step. decode_step() is forward_batch() with one row (the same
//    code, not a second forward).
//  * forward(): the reference path, plain LibTorch ops, any T. It is the independent twin that tests hold
//    forward_batch, the reference device and the CUDA decoder to (transformer_test, forward_batch_test, the
//    golden and hf_reference tests), and the differentiable path training runs; it keeps the layer order in
//    its own words on purpose, and runs the KV pipeline in its naive order: project → RoPE → codec append →
//    read K/V back → attend with an explicit causal mask.
// Every path runs the sequence's serving stage, the repair operator (SequenceKv::set_repair): forward_batch()
// in folded form on raw pointers, forward() in the form KvStudy::repair_path picks
// (folded by default). What only studies the pipeline (corruption, the repair form, FIMKVSplice's temporal
// reconstruction, the training taps) is a KvStudy (core/kv/kv_study.h) that only forward() takes: the fast
// path cannot be handed a stage it does not run. forward() is differentiable in the repair parameters and
// the KVSplice bases: the codec and the corruption pass gradients straight through (identity), which is how
// kv_repair and kvsplice training run (core/train).
//
// Weights are immutable after construction; const methods are safe to call concurrently on
// different SequenceKv / scratch objects.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/kv/kv_study.h"
#include "core/kv/sequence_kv.h"
#include "core/model/model_config.h"
#include "core/model/rope.h"
#include "core/model/variants.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant.h"

namespace frost {

// Matrices are [out, in] (torch Linear layout; GPT-2 Conv1D weights are transposed at load)
// in the configured weight dtype (fp32 or bf16; fp16 for a device decoder only). Norm weights, biases and
// RoPE tables fp32. Quantized models (int8 / int4, core/model/quantize.h) hold each quantized matrix twice:
// `*_q` is what the fast paths read (packed for kernels::gemm_packed), and the fp32 tensor beside it is its
// exact dequantized value, which the reference path, training and Predict compute with — the same model, not
// the original.
struct LayerWeights {
  at::Tensor attn_norm_w, attn_norm_b;  // [C]; b undefined for RMSNorm
  at::Tensor wqkv, bqkv;                // [H*D + 2*Hkv*D, C] rows q | k | v; bias optional
  at::Tensor wo, bo;                    // [C, H*D]; undefined in router layers (var.proj_*)
  at::Tensor mlp_norm_w, mlp_norm_b;    // [C] (Gemma: pre_feedforward_layernorm)
  at::Tensor q_norm_w, k_norm_w;        // [D] Qwen 3, Gemma 3: RMSNorm of each q / k head before RoPE
  at::Tensor post_attn_norm_w;          // [C] Gemma: the attention output's norm, before the residual add
  at::Tensor post_mlp_norm_w;           // [C] Gemma: the MLP output's norm, before the residual add
  at::Tensor w_in, b_in;                // LLaMA: [2F, C] rows gate | up; GPT-2: c_fc [F, C]
  at::Tensor w_out, b_out;              // [C, F]
  VariantLayerWeights var;              // architecture variants (core/model/variants.h)
  kernels::QuantizedMatrix wqkv_q, wo_q, w_in_q, w_out_q;  // int8 / int4 models only
};

struct ModelWeights {
  at::Tensor tok_embed;  // [V, C]
  at::Tensor pos_embed;  // [max_pos, C] GPT-2 only
  std::vector<LayerWeights> layers;
  at::Tensor final_norm_w, final_norm_b;  // [C]
  at::Tensor lm_head;                     // [V, C]; aliases tok_embed when tied
  kernels::QuantizedMatrix lm_head_q;     // int8 / int4 models (tok_embed then stays as loaded, for lookups)
  WeightDtype dtype = WeightDtype::kF32;  // how the matrices are stored and read
};

// One sequence's new tokens in a batched step (forward_batch).
struct StepSeq {
  SequenceKv* kv = nullptr;         // positions kv->n_tokens() .. + n_tokens − 1 are written (reserved)
  const int32_t* tokens = nullptr;  // [n_tokens] ids < V
  int64_t n_tokens = 0;
  bool logits = false;  // compute the logits of its last new token
  // Speculative decoding (core/generate/speculation.h): the last `draft` tokens are drafted ones (draft <
  // n_tokens, logits set); the logits of the draft + 1 last rows are computed, in order — row i predicts the
  // token after tokens[n_tokens - 1 - draft + i], which verification compares with draft token i.
  int32_t draft = 0;
  int64_t n_logit_rows() const { return logits ? 1 + draft : 0; }
};

// Buffers of forward_batch, grown on demand and reused across steps (one per engine thread). R = rows of
// the step (all new tokens), L = sequences with logits.
struct BatchScratch {
  std::vector<float> x, xn;         // [R, C] residual stream, normed / projected rows
  std::vector<float> qkv, qa, att;  // [R, H·D + 2·Hkv·D], [R, H·D] repaired queries, [R, H·D]
  std::vector<float> h_in, h_act;   // [R, F_in], [R, F]
  std::vector<float> final_x;       // [L, C] the final-norm hidden states of the logit rows
  std::vector<float> logits;        // [L, V]
  std::vector<int64_t> pos, seq;    // [R] each row's position and sequence index
  std::vector<int64_t> logit_rows;  // [L] the rows whose logits are computed
  std::vector<std::pair<int64_t, int64_t>> tiles;  // attention tiles: rows [first, last) of one sequence
  std::vector<float> repair_gv, repair_tmp, e_tok, ctx_summary;
  VariantScratch var;
  int64_t var_dim = 0;
};

// decode_step's buffers: forward_batch's, and its batch of one sequence (reused: no allocation per token).
struct DecodeScratch {
  BatchScratch batch;
  std::vector<StepSeq> one;
  int32_t token = 0;
  // The final-norm hidden state [C] of the last decode_step (valid until the next call).
  const float* hidden() const { return batch.final_x.data(); }
};

class Transformer {
 public:
  // Takes validated config and weights (see model_loader.cc / builtin_models.cc).
  Transformer(ModelConfig cfg, ModelWeights w);

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return w_; }
  // The tensor dtype of the matrices (fp32 for int8 / int4: their dequantized values) and the served
  // format ("fp32" | "bf16" | "fp16" | "int8" | "int4" | "w8a8"; fp16 is served only by a device decoder).
  at::ScalarType weight_dtype() const { return wdtype_; }
  WeightDtype weight_format() const { return w_.dtype; }
  int64_t n_params() const;
  int64_t weight_bytes() const;

  // KvSpec for a sequence of up to max_tokens positions (<= max_pos). kvsplice needs `splice`.
  KvSpec kv_spec(int64_t max_tokens, KvCodecKind codec,
                 std::shared_ptr<const KvSpliceSet> splice = nullptr) const;

  // Reference path. tokens [T] (int64, values < V) are placed at positions
  // kv.n_tokens() .. +T-1; kv advances by T. Returns logits [T, V] (or [1, V] of the last
  // position when last_only). When hidden_out is given it receives the final-norm hidden
  // states [T, C]. Throws c10::Error on broken invariants (wrap with torch_call).
  at::Tensor forward(const at::Tensor& tokens, SequenceKv& kv, bool last_only = false,
                     at::Tensor* hidden_out = nullptr) const;
  // The same under a study of the KV pipeline (training and evaluation): its corruption, repair form and
  // FIMKVSplice run, and its taps are filled (appended to; clear() between runs).
  at::Tensor forward(const at::Tensor& tokens, SequenceKv& kv, KvStudy& study, bool last_only = false,
                     at::Tensor* hidden_out = nullptr) const;

  // Batch-1 decode: forward_batch() with one row, the token at position kv.n_tokens(); kv advances by 1.
  // Returns the logits [V] (in scratch, valid until the next call with it).
  const float* decode_step(int32_t token, SequenceKv& kv, DecodeScratch& scratch) const;

  // The serving step (continuous batching): the new tokens of every sequence in `seqs` as one ragged batch
  // of rows, through the layer sequence (core/model/layer_sequence.h) on the CPU's ops. Every weight matrix
  // is read once (kernels::gemm_packed over all rows); attention runs per row
  // over its own sequence's cache through that sequence's codec kernel (so sequences with different codecs,
  // repair operators and KVSplice sets share a step), in parallel over rows × heads. Each kv advances by its
  // n_tokens. Returns the logits [L, V] (in scratch.logits, valid until the next call) of the last token of
  // each sequence with logits = true — its last draft + 1 tokens for a speculative draft — in order. A row's arithmetic does not depend on the rest of the batch:
  // its logits are bit-identical however the rows are batched, chunked or recomputed. Throws c10::Error on
  // broken invariants (capacity, token range).
  const float* forward_batch(const std::vector<StepSeq>& seqs, BatchScratch& scratch) const;
  // Bytes of the packed copies forward_batch reads (made on first use; 0 contribution before).
  int64_t packed_weight_bytes() const;
  // Bytes decode reads per step in the served format: the packed matrices (packing them if needed) plus
  // the norms and biases, plus one row of embeddings (a lookup). What weight bandwidth per token is.
  int64_t served_weight_bytes_per_token() const;
  // Bytes the served weights hold: the packed matrices, embeddings, norms and biases (not the reference
  // path's copies).
  int64_t served_weight_bytes() const;

 private:
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const;
  at::Tensor norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const;
  at::Tensor apply_rope(const at::Tensor& x /*[T, n, D]*/, int64_t pos, const RopeTable& table) const;
  // Layer l's rotation: the global table, or Gemma 3's local one for its sliding layers.
  const RopeTable& rope_of(int64_t l) const { return rope_[cfg_.local_rope(l) ? 1 : 0]; }

  // forward_batch's LayerOps (forward_batch.cc).
  struct BatchOps;

  // The weight matrices packed for kernels::gemm_packed, made once on first use (a process that never runs
  // forward_batch never pays their memory).
  struct PackedLayer {
    kernels::PackedMatrix wqkv, wo, w_in, w_out;
  };
  void ensure_packed() const;

  ModelConfig cfg_;
  ModelWeights w_;
  mutable std::once_flag packed_once_;
  mutable std::vector<PackedLayer> packed_;
  mutable kernels::PackedMatrix packed_head_;
  at::ScalarType wdtype_ = at::kFloat;  // dtype of the matrices (fp32, bf16, or fp16 for a device)
  std::vector<RopeTable> rope_;         // LLaMA-shaped: [0] global, [1] local (Gemma 3); core/model/rope.h
};

}  // namespace frost
