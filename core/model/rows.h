#pragma once
// Per-row pieces of the CPU step (forward_batch.cc: a ragged batch of rows, batch-1 decode being one row): a
// row's arithmetic does not depend on the rows beside it. Internal to core/model.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>

#include <cmath>
#include <cstring>

#include "core/model/model_config.h"
#include "kernels/cpu/exp.h"

namespace frost::rows {

inline const float* fptr(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// RMSNorm or LayerNorm of x [C] into out [C] (fp32).
inline void norm_row(const ModelConfig& cfg, const float* x, const float* w, const float* b, float* out) {
  const int64_t C = cfg.dim;
  if (cfg.arch == Arch::kLlama) {
    float ss = 0;
    for (int64_t i = 0; i < C; ++i) ss += x[i] * x[i];
    const float r = 1.f / std::sqrt(ss / static_cast<float>(C) + static_cast<float>(cfg.norm_eps));
    for (int64_t i = 0; i < C; ++i) out[i] = x[i] * r * w[i];
  } else {
    float mean = 0;
    for (int64_t i = 0; i < C; ++i) mean += x[i];
    mean /= static_cast<float>(C);
    float var = 0;
    for (int64_t i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= static_cast<float>(C);
    const float r = 1.f / std::sqrt(var + static_cast<float>(cfg.norm_eps));
    for (int64_t i = 0; i < C; ++i) out[i] = (x[i] - mean) * r * w[i] + b[i];
  }
}

// In-place HF rotate_half RoPE on n heads of D at one position (cos_row / sin_row: that position's table row):
// the first `rot` dims of each head rotate (pairs j, j + rot/2), the rest pass through (partial rotary).
inline void rope_row(float* x, int64_t n, int64_t d, int64_t rot, const float* cos_row, const float* sin_row) {
  const int64_t half = rot / 2;
  for (int64_t h = 0; h < n; ++h) {
    float* xh = x + h * d;
    for (int64_t j = 0; j < half; ++j) {
      const float a = xh[j], b = xh[j + half];
      xh[j] = a * cos_row[j] - b * sin_row[j];
      xh[j + half] = b * cos_row[j] + a * sin_row[j];
    }
  }
}

inline void embed_row(const at::Tensor& table, int64_t id, float* out) {
  const int64_t C = table.size(1);
  if (table.scalar_type() == at::kFloat) {
    std::memcpy(out, table.data_ptr<float>() + id * C, static_cast<size_t>(C) * sizeof(float));
  } else {
    const auto* src = table.data_ptr<c10::BFloat16>() + id * C;
    for (int64_t i = 0; i < C; ++i) out[i] = static_cast<float>(src[i]);
  }
}


// gelu_new / gelu_pytorch_tanh: 0.5 u (1 + tanh(√(2/π) (u + 0.044715 u³))).
inline float gelu_tanh(float u) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * u * (1.f + std::tanh(kC * (u + 0.044715f * u * u * u)));
}

// MLP activation of one row: LLaMA-shaped, gated over h_in [2F] (rows gate | up): SwiGLU silu(gate) · up, or
// Gemma's gelu_tanh(gate) · up; GPT-2 gelu_new over h_in [F]. Into act [F].
inline void mlp_activation(const ModelConfig& cfg, const float* hin, float* act) {
  const int64_t F = cfg.ffn_dim;
  if (cfg.arch == Arch::kLlama && cfg.act == Activation::kSilu) {
    softmax::swiglu(hin, hin + F, F, act);  // vectorised, our own exp (kernels/cpu/exp.h)
  } else if (cfg.arch == Arch::kLlama) {
    for (int64_t i = 0; i < F; ++i) act[i] = gelu_tanh(hin[i]) * hin[F + i];
  } else {
    for (int64_t i = 0; i < F; ++i) act[i] = gelu_tanh(hin[i]);
  }
}

// In-place RMSNorm of n heads of d (Qwen 3 / Gemma 3's q / k norms; w [d]).
inline void head_rms_norm(float* x, int64_t n, int64_t d, const float* w, float eps) {
  for (int64_t h = 0; h < n; ++h) {
    float* xh = x + h * d;
    float ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += xh[i] * xh[i];
    const float r = 1.f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int64_t i = 0; i < d; ++i) xh[i] = xh[i] * r * w[i];
  }
}

}  // namespace frost::rows
