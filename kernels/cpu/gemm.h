#pragma once
// y = x Wᵀ (+ b) for a batch of activation rows against a weight matrix packed once at load: the GEMM of
// the batched serving step (core/model/forward_batch.cc). Pure math, no knowledge of models.
//
// Layout (PackedMatrix): W [n_out, n_in] (fp32 or bf16) is cut into panels of 32 output rows; panel p is
// stored transposed, [n_in][32] contiguous (the last panel zero-padded). One pass over a panel feeds 32
// outputs of every activation row in a register tile, so each weight is read once per step whatever the
// batch size, with no horizontal reductions (the outer-product form BLAS micro-kernels use).
//
// Arithmetic (the contract tests hold, and why it is this way): every output element is
//   acc = 0; for k = 0 .. n_in−1: acc = fma(x[k], W[o, k], acc);  y = acc + b[o]
// in fp32, in that order, whatever the batch size, the tile, the thread split or the ISA (AVX-512, AVX2 or
// scalar: each SIMD lane runs exactly this chain). So a row's result never depends on which other rows
// share its step: batched decode, chunked prefill and recompute after preemption are bit-identical, and
// gemm_packed_ref (a scalar loop with std::fma) is its exact twin. bf16 weights are widened to fp32 in
// registers (activations stay fp32: the same math as the reference path's upcast).
#include <ATen/ATen.h>

#include <cstdint>

namespace frost::kernels {

struct PackedMatrix {
  at::Tensor panels;  // [P, n_in, 32] of fp32 or bf16, P = ceil(n_out / 32)
  int64_t n_out = 0, n_in = 0;
  bool defined() const { return panels.defined(); }
  at::ScalarType dtype() const { return panels.scalar_type(); }
  int64_t bytes() const { return panels.defined() ? panels.numel() * static_cast<int64_t>(panels.element_size()) : 0; }
};

// Packs W [n_out, n_in] (contiguous fp32 or bf16); the dtype is kept.
PackedMatrix pack_matrix(const at::Tensor& w);

// y[r, o] for r < n_rows, o < n_out: x rows are ldx floats apart, y rows ldy floats apart; b may be null.
// Parallel over output panels (and row blocks for large batches) on LibTorch's pool, the tasks claimed
// dynamically (kernels/cpu/parallel.h). y must not alias x.
void gemm_packed(const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                 int64_t ldy);

// The scalar twin: the same fma chain per element, on the unpacked W [n_out, n_in] (fp32 or bf16).
void gemm_packed_ref(const at::Tensor& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                     int64_t ldy);

}  // namespace frost::kernels
