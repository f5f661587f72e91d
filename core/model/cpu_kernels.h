#pragma once
// CPU kernels of the fast batch-1 decode path, on raw pointers. Each has a naive reference
// twin (the *_ref functions) that tests hold it to.
//
// Why our own mat-vec: a one-row linear/mm through OpenBLAS repacks the whole weight matrix
// per call (DESIGN.md "BLAS and threads"), and a LibTorch op costs ~1 µs; decode is bound by
// reading the weights once, so a fused AVX-512/AVX2 row-dot kernel parallelised over output
// rows with at::parallel_for (LibTorch's OpenMP pool — the only pool) is the fast path.
#include <cstdint>

#include <c10/core/ScalarType.h>

namespace frost::kernels {

// y[o] = Σ_i W[o, i] · x[i] (+ b[o] when b != nullptr), o < n_out. W is row-major
// [n_out, n_in] fp32 or bf16 (raw uint16 storage). Parallel over rows; y must not alias x.
void matvec(const void* w, c10::ScalarType w_dtype, const float* x, const float* b, float* y,
            int64_t n_out, int64_t n_in);
// Scalar reference with double accumulation.
void matvec_ref(const void* w, c10::ScalarType w_dtype, const float* x, const float* b, float* y,
                int64_t n_out, int64_t n_in);

// Single-query attention over a cache laid out [Hkv, t_max, D] (fp32/fp16/bf16 storage):
// out[h] = Σ_{t<n} softmax_t(scale · q[h]·K[g, t]) V[g, t], g = h / (H / Hkv).
// q, out: [H, D]; scores: scratch of H * n floats.
void attend_one(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale, float* scores,
                float* out);
void attend_one_ref(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                    int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale, float* out);

// The same over a quantised cache (core/kv/codec_quant.cc): bits = 8, k/v int8 [Hkv, t_max, D]; or
// bits = 4, k/v packed nibbles [Hkv, t_max, D/2]; ks/vs the per-token per-head scales [Hkv, t_max].
// Uses q·(s_t k̂_t) = s_t (q·k̂_t) and Σ p_t s_t v̂_t, so rows are never dequantised into memory.
void attend_one_quant(const float* q, const void* k, const float* ks, const void* v, const float* vs, int bits,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale,
                      float* scores, float* out);

}  // namespace frost::kernels
