#pragma once
// int8 / int4 weights (model.dtype): the checkpoint's fp32 matrices quantized at load with
// kernels/cpu/quant.h — q/k/v, output, MLP in/out of every layer and the LM head. What stays as loaded:
// the token (and GPT-2 position) embeddings, read one row per token (a lookup, not a stream: quantizing
// them would save no bandwidth), the norms, biases, and architecture-variant projections.
//
// Formats (choices measured in docs/quantization.md):
//   int8  every matrix symmetric int8, a scale per group of kInt8Group = 32 inputs (per output channel, one
//         scale per row, reads 6% fewer bytes but doubled the perplexity cost on stories260K: +0.13% vs
//         +0.06% on sampled stories)
//   int4  q/k/v, output and MLP-in projections int4 (a scale and a least-squares minimum per 32 inputs);
//         the MLP output projection and the LM head int8 as above — the two matrices whose rounding the
//         next token is most sensitive to (llama.cpp's Q4_K_M keeps ffn_down and output wider for the same
//         reason). On stories260K: +4.4% perplexity against +8.0% with every matrix int4, for 16% more bytes
//         (0.22 MB vs 0.20 MB per token; fp32 1.05 MB).
// Each quantized matrix replaces its fp32 tensor by the exact dequantized value (the reference path,
// training and Predict then compute the same model the fast path does) and keeps the quantized form for
// packing (LayerWeights::*_q).
#include <cstdint>

#include "absl/status/status.h"
#include "core/model/transformer.h"

namespace frost {

inline constexpr int64_t kInt8Group = 32;
inline constexpr int64_t kInt4Group = 32;

// Quantizes `w` (fp32 matrices) to `dtype` (kInt8 / kInt4; kF32 and kBF16 leave it unchanged). `int8_group`
// overrides kInt8Group (0 = per output channel; benchmarks compare them).
absl::Status quantize_weights(ModelWeights& w, WeightDtype dtype, int64_t int8_group = kInt8Group);

}  // namespace frost
