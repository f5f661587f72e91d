#pragma once
// The CUDA kernels of the decoder step, as host launchers over plain device pointers (no LibTorch).
// Each has a CPU twin in kernels/cuda/reference.h that tests/gpu/ holds it to on random inputs.
//
// Conventions:
// - Activations are fp32, row-major [rows, n]. Weights are fp32, bf16, fp16 or int8 (DType), row-major
//   [n_out, n_in] (frost's fused layout: wqkv = [q; k; v], LLaMA w_in = [gate; up]); int8 with fp32 scales
//   [n_out, ceil(n_in / group)] (kernels/cpu/quant.h's format: the weight is float(q) · scale).
// - 2-byte weights: a product takes the weight widened exactly to fp32 and the activation rounded to the
//   weight's format (round to nearest even), and sums in fp32 — the GEMV kernel and the cuBLAS GEMM
//   (CUDA_R_16BF / CUDA_R_16F inputs, CUBLAS_COMPUTE_32F) alike. fp16's range ends at 65504: an activation of
//   magnitude 65520 or more rounds to ±inf (IEEE, __float2half_rn; not saturated), and fp16 weights beyond
//   the range are refused at load (core/model/model_loader.cc). Activations of that size do not occur in the
//   models served (the residual stream itself stays fp32).
// - A step is a ragged batch of rows; row r is (token, sequence slot, absolute position). Per-row
//   metadata lives in device memory so that a captured CUDA graph replays with new values.
// - Paged KV: a pool of blocks of `block_tokens` positions; sequence s's position p lives in block
//   block_table[s * max_blocks + p / block_tokens], slot p % block_tokens. KvLayout says where a layer's
//   rows and scales sit inside a block.
// - Every launcher is asynchronous on `stream` and checks the launch (FROST_CUDA_CHECK).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/layout.h"

namespace frost::cuda {

// Per-row metadata of a step, all device arrays of n_rows (block_table: max_seqs * max_blocks).
struct StepRows {
  const int32_t* token = nullptr;
  const int32_t* seq = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* block_table = nullptr;
  int max_blocks = 0;  // per sequence
};

// out[r] = embed[token[r]] (+ pos_embed[pos[r]] when pos_embed is non-null); the table fp32, bf16 or fp16 (an
// int8 model's table is fp32).
void embed(const void* table, DType dt, const float* pos_embed, const StepRows& rows, int n_rows, int dim,
           float* out, cudaStream_t stream);

// out = x · rsqrt(mean(x²) + eps) · w (HF LlamaRMSNorm).
void rmsnorm(const float* x, const float* w, int n_rows, int dim, float eps, float* out, cudaStream_t stream);
// out = (x − mean) / sqrt(var + eps) · w + b (biased variance, as torch.layer_norm).
void layernorm(const float* x, const float* w, const float* b, int n_rows, int dim, float eps, float* out,
               cudaStream_t stream);

// For each row of qkv [rows, (H + 2·Hkv)·D]: RoPE (HF rotate_half, rope_cos/sin [max_pos, D/2]; null for
// GPT-2) on its q and k heads in place, then k and v written to the row's position in layer `layer` of
// the pool through the format (int8/int4: kernels/cpu/kv_quant_row.h, bit for bit).
void rope_kv_append(float* qkv, const float* rope_cos, const float* rope_sin, const StepRows& rows,
                    int n_rows, int n_head, const KvLayout& kv, int layer, uint8_t* pool,
                    cudaStream_t stream);

// out[r, h·D : (h+1)·D] = softmax(q_h · K[0..pos[r]]ᵀ · scale) · V[0..pos[r]] for every query head h of
// row r (GQA: head h reads kv head h / (H / Hkv)), K and V read through the row's block table and decoded
// in registers. q is the q part of qkv (row stride (H + 2·Hkv)·D). head_dim: a multiple of 8, ≤ 128.
// Positions are split in n_splits pieces of split_len (flash-decoding), merged in `partials`
// (attention_partials_floats) when a row has more than one.
// (The split: attention_split in kernels/cuda/layout.h.)
int64_t attention_partials_floats(int max_rows, int n_head, int head_dim);
void attention(const float* qkv, const StepRows& rows, int n_rows, int n_head, const KvLayout& kv, int layer,
               const uint8_t* pool, float scale, AttentionSplit split, float* partials, float* out,
               cudaStream_t stream);

// out[r, j] = silu(gu[r, j]) · gu[r, F + j]
void swiglu(const float* gu, int n_rows, int ffn, float* out, cudaStream_t stream);
// x = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) in place (GPT-2 gelu_new).
void gelu_new(float* x, int64_t n, cudaStream_t stream);
// y[r, :] += b
void add_bias(float* y, const float* b, int n_rows, int n, cudaStream_t stream);
// dst[i, :] = src[idx[i], :]
void gather_rows(const float* src, const int32_t* idx, int n_idx, int n, float* dst, cudaStream_t stream);

// y[r, :] (+)= W · x̃[r, :] (+ b) for n_rows ≤ kGemvMaxRows (kernels/cuda/gemv.cu): one pass over W with
// 16-byte loads, a block per 16, 8 or 4 outputs (1, 2–4, 5–8 rows). The batch-1 decode path; the GEMM path
// (cuBLAS) is its twin for larger batches. x̃ is x, or x RMS-normalised with norm_w (the rmsnorm kernel fused
// in), or SwiGLU of x = [gate | up] (x has 2·n_in columns; the swiglu kernel fused in). bf16 / fp16 weights
// multiply x̃ rounded to bf16 / fp16 (as the GEMM does), accumulating in fp32. int8 (weight-only): `scales`
// and `group` as above; each weight float(q) · scale in fp32 times x̃ as it is (not rounded), fp32
// accumulation; a block's two halves take half its outputs each (a 16-byte load is 16 weights). A row's
// result does not depend on n_rows (the same sums in the same order), so a step of more rows may run in
// pieces of kGemvMaxRows.
constexpr int kGemvMaxRows = 8;
enum class GemvInput { kPlain, kRmsNorm, kSwiGlu };
void gemv(const void* w, DType dt, const float* x, int n_rows, int n_out, int n_in, const float* bias,
          bool accumulate, float* y, cudaStream_t stream, GemvInput in = GemvInput::kPlain,
          const float* norm_w = nullptr, float eps = 0.f, const float* scales = nullptr, int group = 0);
// int8 matrices (kernels/cpu/quant.h's format, bit for bit its functions): dequantize_int8 writes out[o, k] =
// float(q[o, k]) · scales[o, k / group] (the fp32 matrix of the cuBLAS GEMM above the GEMV's rows);
// quantize_int8 is quantize_int8() on the device — per row and group s = max|w| / 127, q = round(w / s)
// (ties away from zero) clamped to ±127, s = 0 → q = 0 — for random benchmark weights made on the device.
void dequantize_int8(const int8_t* q, const float* scales, int64_t n_out, int n_in, int group, float* out,
                     cudaStream_t stream);
void quantize_int8(const float* w, int64_t n_out, int n_in, int group, int8_t* q, float* scales,
                   cudaStream_t stream);
// dst = src rounded to dt (bf16 or fp16; fp32 throws), nearest even (activations for the 2-byte GEMM).
void to_half(const float* src, int64_t n, DType dt, uint16_t* dst, cudaStream_t stream);
// Fills dst (fp32, or rounded to bf16 / fp16) with uniform values in [−a, a) (+ mean) from a counter hash of
// (seed, index): random benchmark weights made on the device.
void fill_uniform(void* dst, DType dt, int64_t n, uint64_t seed, float a, float mean, cudaStream_t stream);

// Sampling, one row of logits [n_rows, V] per sequence; only the chosen ids leave the device.
// Greedy: the largest logit, ties → lowest id, NaN never chosen (the CPU sampler's rule).
void argmax(const float* logits, int n_rows, int vocab, int32_t* out, cudaStream_t stream);
// The host sampler's function on the device (kernels/cuda/sample.cu; twin: ref::sample_row), one block per
// row: greedy, or temperature with top-k, top-p and min-p in the host's order, p = exp((l − l_max)/T) by the
// host's own exp (kernels/cpu/exp.h, the same fp32 operations: the same probabilities bit for bit), the kept
// tokens walked in the host's order — (logit desc, id asc) after top-k, (p desc, id asc) after top-p, else
// ascending ids — to the first whose cumulative mass exceeds u · total. Sums are double but in another
// order than the host's, so on the same logits and u the token equals the host's unless u · total lies
// within rounding (~1e-15 relative) of a cumulative boundary. Rows with params[r].to_host set are skipped
// (out[r] = −1). `scratch`: n_rows · vocab floats (the rows' probabilities).
void sample_rows(const float* logits, int n_rows, int vocab, const SampleParams* params, float* scratch,
                 int32_t* out, cudaStream_t stream);
// Constrained decoding, before sample_rows (twin: ref::apply_token_mask): for each row r with
// params[r].masked (and not to_host), logits[r, i] = -inf for every token i whose bit is clear in row r's
// mask — ceil(vocab / 32) words at masks + r · ceil(vocab / 32), core/constrain/token_mask.h's layout. Other
// rows are untouched.
void apply_token_masks(float* logits, int n_rows, int vocab, const SampleParams* params,
                       const uint32_t* masks, cudaStream_t stream);

}  // namespace frost::cuda
