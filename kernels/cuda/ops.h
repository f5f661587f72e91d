#pragma once
// The CUDA kernels of the decoder step, as host launchers over plain device pointers (no LibTorch).
// Each has a CPU twin in kernels/cuda/reference.h that tests/gpu/ holds it to on random inputs.
//
// Conventions:
// - Activations are fp32, row-major [rows, n]. Weights are fp32 or bf16, row-major [n_out, n_in]
//   (frost's fused layout: wqkv = [q; k; v], LLaMA w_in = [gate; up]).
// - A step is a ragged batch of rows; row r is (token, sequence slot, absolute position). Per-row
//   metadata lives in device memory so that a captured CUDA graph replays with new values.
// - Paged KV: a pool of blocks of `block_tokens` positions; sequence s's position p lives in block
//   block_table[s * max_blocks + p / block_tokens], slot p % block_tokens. KvLayout says where a layer's
//   rows and scales sit inside a block.
// - Every launcher is asynchronous on `stream` and checks the launch (FROST_CUDA_CHECK).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define FROST_HD __host__ __device__
#else
#define FROST_HD
#endif

namespace frost::cuda {

enum class DType { kF32, kBF16 };                         // weight storage
enum class KvFormat { kF32, kF16, kBF16, kInt8, kInt4 };  // KV storage (frost's codec names)

const char* kv_format_name(KvFormat f);  // "fp32" | "fp16" | "bf16" | "int8" | "int4"
// Bytes of one head row of D values (without its scale).
FROST_HD inline int64_t kv_row_bytes(KvFormat f, int64_t d) {
  return f == KvFormat::kF32 ? 4 * d : f == KvFormat::kInt8 ? d : f == KvFormat::kInt4 ? d / 2 : 2 * d;
}
FROST_HD inline bool kv_has_scales(KvFormat f) { return f == KvFormat::kInt8 || f == KvFormat::kInt4; }

// Where one layer's K / V rows and scales sit in the pool. Block b of layer l starts at
// pool + (b * n_layer + l) * layer_block_bytes; inside it: K rows [Hkv, bt, row_bytes], V rows (same),
// then (int codecs) K scales [Hkv, bt] fp32 and V scales [Hkv, bt] fp32.
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
};

// Per-row metadata of a step, all device arrays of n_rows (block_table: max_seqs * max_blocks).
struct StepRows {
  const int32_t* token = nullptr;
  const int32_t* seq = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* block_table = nullptr;
  int max_blocks = 0;  // per sequence
};

// out[r] = embed[token[r]] (+ pos_embed[pos[r]] when pos_embed is non-null).
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
constexpr int kAttnSplits = 64, kAttnMaxSplit = 256;  // up to 16,384 positions
struct AttentionSplit {
  int split_len = 32, n_splits = 1;
};
// The split for a step of n_rows whose longest row attends to max_positions: pieces (≥ 16 positions, a power
// of two) enough for n_rows · n_head_kv · pieces to reach target_blocks (a few per multiprocessor), their
// count rounded up to a power of two. Throws past 16,384 positions.
AttentionSplit attention_split(int max_positions, int n_rows, int n_head_kv, int target_blocks);
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

// y[r, :] (+)= W · x̃[r, :] (+ b) for n_rows ≤ kGemvMaxRows: one pass over W with 16-byte loads, a block per
// 16, 8 or 4 outputs (1, 2–4, 5–8 rows). The batch-1 decode path; the GEMM path (cuBLAS) is its twin for
// larger batches. x̃ is x, or x RMS-normalised with norm_w (the rmsnorm kernel fused in), or SwiGLU of x =
// [gate | up] (x has 2·n_in columns; the swiglu kernel fused in). bf16 weights multiply bf16-rounded x̃ (as
// the bf16 GEMM does), accumulating in fp32.
constexpr int kGemvMaxRows = 8;
enum class GemvInput { kPlain, kRmsNorm, kSwiGlu };
void gemv(const void* w, DType dt, const float* x, int n_rows, int n_out, int n_in, const float* bias,
          bool accumulate, float* y, cudaStream_t stream, GemvInput in = GemvInput::kPlain,
          const float* norm_w = nullptr, float eps = 0.f);
// dst = bf16(src), round to nearest even (activations for the bf16 GEMM).
void to_bf16(const float* src, int64_t n, uint16_t* dst, cudaStream_t stream);
// Fills dst with uniform values in [−a, a) (+ mean) from a counter hash of (seed, index): random benchmark
// weights made on the device.
void fill_uniform(void* dst, DType dt, int64_t n, uint64_t seed, float a, float mean, cudaStream_t stream);

// Sampling, one row of logits [n_rows, V] per sequence; only the chosen ids leave the device.
// Greedy: the largest logit, ties → lowest id, NaN never chosen (the CPU sampler's rule).
void argmax(const float* logits, int n_rows, int vocab, int32_t* out, cudaStream_t stream);
// Temperature sampling with min-p: p ∝ exp(l/T − max); tokens with p < min_p · p_max dropped; the draw
// walks ids in ascending order to the first whose cumulative mass exceeds u[r] · total (u from the
// host's per-sequence generator, so a seed reproduces the same tokens). temperature[r] == 0 → greedy.
void sample(const float* logits, int n_rows, int vocab, const float* temperature, const float* min_p,
            const double* u, int32_t* out, cudaStream_t stream);

}  // namespace frost::cuda
