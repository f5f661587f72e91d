#pragma once
// y = x Wᵀ (+ b) for a batch of activation rows against a weight matrix packed once at load: the GEMM of
// the batched serving step and of batch-1 decode (core/model/forward_batch.cc: one step, any rows). Pure math,
// no knowledge of models.
//
// Layout (PackedMatrix): W [n_out, n_in] is cut into panels of 32 output rows; panel p is stored transposed,
// [n_in][32] (the last panel zero-padded). One pass over a panel feeds 32 outputs of every activation row in
// a register tile, so each weight is read once per step whatever the batch size, with no horizontal
// reductions (the outer-product form BLAS micro-kernels use). Formats:
//   kF32, kBF16  [P, n_in, 32] of the weights
//   kQ8          int8 [P, n_in, 32] + fp32 scales [P, n_groups, 32]            (kernels/cpu/quant.h)
//   kQ4          uint8 [P, n_in, 16], byte j of a row = output j (low nibble) | output j+16 (high nibble),
//                + fp32 scales and minimums [P, n_groups, 32]
//
// Arithmetic (the contract tests hold, and why it is this way): every output element is
//   acc = 0; for k = 0 .. n_in−1: acc = fma(x[k], w(o, k), acc);  y = acc + b[o]
// in fp32, in that order, where w(o, k) is the weight as fp32 — for bf16 widened exactly, for int8/int4
// dequantized exactly as quant.h's dequantize() defines — whatever the batch size, the tile, the thread
// split or the ISA (AVX-512, AVX2 or scalar, chosen at run time: kernels/cpu/isa.h; each SIMD lane runs
// exactly this chain). So a row's result never depends on which other rows share its step (batched decode,
// chunked prefill and recompute after preemption are bit-identical), and gemm_packed_ref on the fp32 matrix
// (dequantize() for int8/int4) is its exact twin. Activations stay fp32.
//
// Quantized panels with few rows (decode) are dequantized in registers as they stream in (the step is bound
// by reading weights: int8 reads 1.125 bytes per weight, int4 0.75, fp32 4); with more rows each panel is
// dequantized once into an L2-resident buffer and the fp32 tile runs over it (the step is bound by FMAs).
// Both give the same bits.
//
// W8A8 (kQ8A8, model.dtype w8a8): the int8 weights of kQ8 with the activations quantized too, so the inner
// product is integer (VPDPBUSD where the CPU has AVX512-VNNI, as llama.cpp's q8_0 × q8_0). Its arithmetic,
// again the same bits on every ISA and for every batch size, is, per activation row r and output o:
//   per input group g (the weights' `group` inputs; one group when group >= n_in):
//     xs = amax / 127 with amax = max |x[k]| over the group (xs = 0, all q = 0 when amax == 0),
//     q[k] = clamp(nearbyint(x[k] · (127 / amax)), −127, 127)            (round half to even)
//     isum = Σ_k q[k] · wq(o, k)                                          (exact int32)
//     acc = fma(float(isum), xs · ws(o, g), acc)                          (fp32, groups in order)
//   y = acc + b[o]
// gemm_q8a8_ref is its scalar twin on the unpacked QuantizedMatrix. Layout: uint8 [P, n_in4 / 4, 32, 4],
// n_in4 = n_in rounded up to 4 (zeros), byte t of lane c of chunk j = wq(32p + c, 4j + t) + 128 (VPDPBUSD
// multiplies unsigned by signed bytes: the weights are the unsigned side, the broadcast activations the
// signed one, and the 128 · Σq[k] this adds is subtracted per row and group, exactly); fp32 scales
// [P, n_groups, 32]. The same 1.125 bytes per weight as kQ8. Requires group % 4 == 0 or group >= n_in.
#include <ATen/ATen.h>

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant.h"

namespace frost::kernels {

enum class PackFormat { kF32, kBF16, kQ8, kQ4, kQ8A8 };
const char* pack_format_name(PackFormat f);  // "fp32" | "bf16" | "int8" | "int4" | "w8a8"

struct PackedMatrix {
  PackFormat format = PackFormat::kF32;
  at::Tensor panels;         // see the layout above
  at::Tensor scales, mins;   // quantized formats: [P, n_groups, 32] fp32 (mins: kQ4 only)
  int64_t n_out = 0, n_in = 0;
  int64_t group = 0;         // inputs per scale (quantized); n_in otherwise
  bool defined() const { return panels.defined(); }
  int64_t bytes() const;     // every tensor it holds
};

// Packs W [n_out, n_in] (contiguous fp32 or bf16); the dtype is kept.
PackedMatrix pack_matrix(const at::Tensor& w);
// The packers' panel layout [n_panels, n_in, 32] of a contiguous [n_out, n_in] matrix (zero rows past n_out):
// the one-pass parallel form the packers use, and its plain-ATen twin (tests hold them equal bit for bit).
at::Tensor panelize_for_test(const at::Tensor& m, int64_t n_panels);
at::Tensor panelize_reference(const at::Tensor& m, int64_t n_panels);
// Packs a quantized matrix (int8 or int4, any group size).
PackedMatrix pack_quantized(const QuantizedMatrix& qm);
// Packs an int8 matrix for W8A8 (group % 4 == 0 or group >= n_in).
PackedMatrix pack_quantized_a8(const QuantizedMatrix& qm);

// W8A8's activation quantization (above), one definition for every variant: rows of x (ldx apart) →
// q [n_rows, ldq] int8 (the first round_up(n_in, 4) of each row written, zeros past n_in) and
// scales [n_rows, lds] (the first ceil(n_in / group) of each row); group >= n_in is one group.
void quantize_activations_a8(const float* x, int64_t ldx, int64_t n_rows, int64_t n_in, int64_t group, int8_t* q,
                             int64_t ldq, float* scales, int64_t lds);
// The scalar twin of W8A8 on the unpacked int8 matrix.
void gemm_q8a8_ref(const QuantizedMatrix& qm, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                   int64_t ldy);

// y[r, o] for r < n_rows, o < n_out: x rows are ldx floats apart, y rows ldy floats apart; b may be null.
// Parallel over output panels (and row blocks for large batches) on LibTorch's pool, the tasks claimed
// dynamically (kernels/cpu/parallel.h). y must not alias x. Runs the active_isa() variant.
void gemm_packed(const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                 int64_t ldy);
// The same with an explicit variant (tests, benchmarks); `isa` must be supported by this CPU.
void gemm_packed_isa(Isa isa, const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows, const float* b,
                     float* y, int64_t ldy);

// The scalar twin: the same fma chain per element, on the unpacked W [n_out, n_in] (fp32 or bf16; for a
// quantized matrix pass dequantize(qm)).
void gemm_packed_ref(const at::Tensor& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                     int64_t ldy);

}  // namespace frost::kernels
