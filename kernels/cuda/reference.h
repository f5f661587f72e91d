#pragma once
// CPU twins of the CUDA kernels (kernels/cuda/ops.h) and a naive CPU forward of the whole decoder
// (kernels/cuda/model.h), in plain C++ (no LibTorch, no CUDA), so that the GPU tests can run on a machine
// with neither LibTorch 1.13 nor this project's other dependencies.
//
// What is exact and what is not: RoPE and the KV row encoders (fp16/bf16 rounding, int8/int4 through
// kernels/cpu/kv_quant_row.h) are the same float operations as the device's, so their bytes must match;
// sums (norms, dot products, attention, softmax) accumulate in double here, so the device's fp32 results
// are held to them within the tolerances the tests state.
#include <cstdint>
#include <vector>

#include "kernels/cuda/model.h"
#include "kernels/cuda/ops.h"

namespace frost::cuda::ref {

uint16_t bf16_bits(float f);  // round to nearest even (the device model's weight upload too)
float bf16_value(uint16_t b);
float bf16_round(float f);   // f rounded to bf16 and back
uint16_t f16_bits(float f);  // IEEE half, round to nearest even
float f16_value(uint16_t h);

void rmsnorm(const float* x, const float* w, int rows, int dim, float eps, float* out);
void layernorm(const float* x, const float* w, const float* b, int rows, int dim, float eps, float* out);
// The RoPE tables the device model builds ([max_pos, D/2], float32 as core/model/transformer.cc).
void rope_tables(int max_pos, int head_dim, double theta, std::vector<float>* cos_t,
                 std::vector<float>* sin_t);
// One head row x[D] rotated in place for position p (unfused float products, as the CPU reference).
void rope_row(float* x, int head_dim, const float* cos_t, const float* sin_t, int p);
// One head row encoded as the pool stores it: row bytes (kv_row_bytes) and, for int formats, the scale.
float encode_row(const float* x, int head_dim, KvFormat f, uint8_t* dst);
// Element i of an encoded row, decoded.
float decode_element(const uint8_t* row, int i, KvFormat f, float scale);
// softmax(q·Kᵀ·scale)·V over n positions for one head; K, V: [n, D] already decoded.
void attend_head(const float* q, const float* k, const float* v, int n, int head_dim, float scale,
                 float* out);
void swiglu(const float* gu, int rows, int ffn, float* out);
void gelu_new(float* x, int64_t n);
// y[r] (+)= W·x[r] (+ b), W fp32 [n_out, n_in] (bf16 = true: W and x rounded to bf16 first).
void linear(const float* w, const float* x, int rows, int n_out, int n_in, const float* b, bool accumulate,
            bool bf16, float* y);
int argmax(const float* logits, int vocab);
// The device sampler's function (ops.h sample): temperature + min-p, ascending-id walk to u · total.
int sample(const float* logits, int vocab, float temperature, float min_p, double u);

// A naive forward of one sequence: logits [T, V] for tokens at positions 0..T-1, with K/V passed through
// the KV format (encode + decode) exactly as the pool stores them, weights (and GEMM inputs) rounded to bf16
// when `weights` is kBF16.
std::vector<float> forward(const ModelSpec& spec, const HostWeights& w, DType weights, KvFormat kv,
                           const std::vector<int32_t>& tokens);

}  // namespace frost::cuda::ref
