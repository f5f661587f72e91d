#pragma once
// CPU twins of the CUDA kernels (kernels/cuda/ops.h), in plain C++ with no CUDA header: the host reference
// device (core/exec/reference_decoder.h) computes the device decoder's step with them, and tests/gpu holds
// each kernel to its twin.
//
// What is exact and what is not: RoPE and the KV row encoders (fp16/bf16 rounding, int8/int4 through
// kernels/cpu/kv_quant_row.h) are the same float operations as the device's, so their bytes must match;
// sums (norms, dot products, attention, softmax) accumulate in double here, so the device's fp32 results
// are held to them within the tolerances the tests state.
#include <cstdint>
#include <vector>

#include "kernels/cuda/layout.h"

namespace frost::cuda::ref {

uint16_t bf16_bits(float f);  // round to nearest even (the device model's weight upload too)
float bf16_value(uint16_t b);
float bf16_round(float f);   // f rounded to bf16 and back
// IEEE binary16, round to nearest even, bit for bit CUDA's __float2half_rn: subnormal halves below 2⁻¹⁴ (down
// to 2⁻²⁴; half of that and less rounds to ±0, ties to even), overflow to ±inf from 65520 on (the midpoint
// between 65504, the largest half, and 2¹⁶), NaN stays NaN (its top payload bits kept, quiet).
uint16_t f16_bits(float f);
float f16_value(uint16_t h);
float f16_round(float f);  // f rounded to fp16 and back
// f as a weight or activation of that storage format reads it: itself (fp32; int8, whose activations are not
// rounded and whose weights are already their dequantized values), bf16_round or f16_round.
float dtype_round(DType d, float f);

void rmsnorm(const float* x, const float* w, int rows, int dim, float eps, float* out);
void layernorm(const float* x, const float* w, const float* b, int rows, int dim, float eps, float* out);
// The RoPE tables the device model builds ([max_pos, D/2], float32 as core/model/transformer.cc).
void rope_tables(int max_pos, int head_dim, double theta, std::vector<float>* cos_t,
                 std::vector<float>* sin_t);
// One head row x[D] rotated in place for position p (unfused float products, as the CPU reference). Partial
// rotary (core/model/rope.h): pass rotary_dim as head_dim and tables [max_pos, rotary_dim / 2] — the first
// rotary_dim dims rotate (pairs j, j + rotary_dim / 2), the rest of the row is not touched.
void rope_row(float* x, int head_dim, const float* cos_t, const float* sin_t, int p);
// One head row encoded as the pool stores it: row bytes (kv_row_bytes) and, for int formats, the scale.
float encode_row(const float* x, int head_dim, KvFormat f, uint8_t* dst);
// Element i of an encoded row, decoded.
float decode_element(const uint8_t* row, int i, KvFormat f, float scale);
// softmax(q·Kᵀ·scale)·V over n positions for one head; K, V: [n, D] already decoded.
void attend_head(const float* q, const float* k, const float* v, int n, int head_dim, float scale,
                 float* out);
// The same over positions [start, end) only (a sliding window: the query at end − 1 sees end − W .. end − 1),
// K, V: [end, D] indexed by position (rows below start are not read); softcap > 0 caps each scaled score,
// s = softcap · tanh(s / softcap), before the softmax (Gemma 2). start 0 and softcap 0 is attend_head.
void attend_window(const float* q, const float* k, const float* v, int start, int end, int head_dim,
                   float scale, float softcap, float* out);
void swiglu(const float* gu, int rows, int ffn, float* out);
// The tanh-GELU gate of a LLaMA-shaped MLP (Gemma): gu [rows, 2F] (gate | up) → out [rows, F] =
// gelu_new(gate) · up, in double.
void gelu_gate(const float* gu, int rows, int ffn, float* out);
void gelu_new(float* x, int64_t n);
// x = cap · tanh(x / cap) over n values (Gemma 2's final-logit soft cap), in double.
void softcap(float* x, int64_t n, float cap);
// y[r] (+)= W·x[r] (+ b), W fp32 [n_out, n_in]; dt bf16 / fp16: W and x rounded to that format first (the
// device's GEMV and GEMM: 2-byte weights times activations rounded alike, sums in fp32 there, in double
// here).
void linear(const float* w, const float* x, int rows, int n_out, int n_in, const float* b, bool accumulate,
            DType dt, float* y);
// The int8 twin (DType::kInt8): y[r] (+)= W·x[r] (+ b) with W = q [n_out, n_in] int8 and scales [n_out,
// ceil(n_in / group)] fp32, each weight float(q) · scale in fp32 (kernels/cpu/quant.h dequantize(), the CPU
// int8 model's values bit for bit), x as it is (weight-only: activations not rounded), sums in double.
void linear_q8(const int8_t* q, const float* scales, int group, const float* x, int rows, int n_out, int n_in,
               const float* b, bool accumulate, float* y);
int argmax(const float* logits, int vocab);
// The device sampler's function (ops.h sample_rows), which is the host sampler's (core/generate/sampler.cc,
// steps 4-9: greedy; top-k; p = exp_nonpositive((l − l_max) · (1/T)); top-p; min-p; the draw), with its sums
// in the same order as the host's general path. p.to_host is ignored.
int sample_row(const float* logits, int vocab, const SampleParams& p);
// Constrained decoding before sample_row (ops.h apply_token_masks): logits[i] = -inf for every token whose
// bit (i % 32 of mask[i / 32]) is clear — the host sampler's masking (core/generate/sampler.cc penalized()).
void apply_token_mask(float* logits, int vocab, const uint32_t* mask);

}  // namespace frost::cuda::ref
