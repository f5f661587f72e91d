#pragma once
// CPU mat-vec kernels on raw pointers, for the architecture variants' per-row projections
// (core/model/variants.cc; the attention kernels belong to the KV codecs: core/kv/attend.h; the step's GEMMs:
// kernels/cpu/gemm.h). Each has a naive reference twin (the *_ref functions) that tests hold it to.
//
// Why our own mat-vec: a one-row linear/mm through OpenBLAS repacks the whole weight matrix per call
// (docs/conventions.md, "BLAS and threads"), and a LibTorch op costs ~1 µs; a fused AVX-512/AVX2 row-dot kernel
// parallelised over output rows with at::parallel_for reads the weights once.
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

}  // namespace frost::kernels

namespace frost {
class KvCodec;
// All n_head heads of one query row q [H·D] over the codec's first n positions, into out [H·D]: the codec's
// own kernel, parallel over heads when the work pays for waking the pool.
void attend_all_heads(const KvCodec& cache, const float* q, int64_t n_head, int64_t head_dim, int64_t n,
                      float scale, float* out);
}  // namespace frost
