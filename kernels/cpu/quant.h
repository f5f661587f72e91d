#pragma once
// Weight quantization for the packed GEMM (kernels/cpu/gemm.h): int8 and int4 formats with a scale per
// group of inputs, and the one definition of what a quantized weight means (dequantize()), which every
// kernel variant computes in registers bit for bit.
//
// int8 (symmetric): per output row and group of `group` inputs, s = max|w| / 127, q = round(w / s) in
//   [-127, 127]; w' = float(q) · s. group = 0: one group per row (per output channel).
// int4 (asymmetric, a minimum per group): m = min w, s = (max w − m) / 15, q = round((w − m) / s) in
//   [0, 15]; w' = fma(float(q), s, m). The minimum keeps groups whose weights are all of one sign at the
//   full 16 levels (symmetric int4 would waste half of them there).
// An all-equal group has s = 0 (int8: w' = 0 … the group was all zero; int4: w' = m exactly).
// Rounding is to nearest, ties away from zero (std::round). Scales and minimums are fp32.
#include <ATen/ATen.h>

#include <cstdint>

namespace frost::kernels {

struct QuantizedMatrix {
  int bits = 0;                         // 8 or 4
  int64_t n_out = 0, n_in = 0, group = 0;  // group: inputs per scale (the last group of a row may be shorter)
  at::Tensor q;       // int8 [n_out, n_in]: int8 values; int4: uint8 values 0..15, one per byte
  at::Tensor scales;  // fp32 [n_out, n_groups]
  at::Tensor mins;    // fp32 [n_out, n_groups] (int4), undefined for int8
  bool defined() const { return q.defined(); }
  int64_t n_groups() const { return (n_in + group - 1) / group; }
  // Bytes of the format itself: q at bits/8 per weight, plus scales (and mins).
  int64_t format_bytes() const;
};

// W [n_out, n_in] fp32 or bf16 (read as fp32). group: inputs per scale, 0 = the whole row (int8 only).
QuantizedMatrix quantize_int8(const at::Tensor& w, int64_t group);
QuantizedMatrix quantize_int4(const at::Tensor& w, int64_t group);
// The fp32 matrix a quantized one stands for (the reference every kernel is held to).
at::Tensor dequantize(const QuantizedMatrix& qm);

}  // namespace frost::kernels
