#pragma once
// CPU attention kernels of the KV codecs, on raw pointers: one query row against a sequence's cached rows,
// read through its block table (core/kv/kv_pages.h). Each fast kernel has a naive reference twin that
// tests hold it to (attend_one_ref: double accumulation over a contiguous [Hkv, t_max, D] cache).
//
// The arithmetic of one (query row, head) is the same whatever else runs in the step — which rows share a
// batch, whether the row is a decode token or part of a prefill chunk, how the rows are split into blocks:
// every row computes its scores in position order, then softmax, then the weighted sum in position order.
// So batched serving, chunked prefill and recompute after preemption give bit-identical results.
//
// Letters: H = query heads, Hkv = kv heads, D = head_dim, n = positions attended.
#include <c10/core/ScalarType.h>

#include <cstdint>

#include "core/kv/kv_pages.h"

namespace frost::kernels {

// Float cache (fp32 / fp16 / bf16 rows of D elements): heads [h0, h1) of q [H·D] into out [H·D].
void attend_paged(const float* q, const KvPagedRows& k, const KvPagedRows& v, c10::ScalarType kv_dtype, int64_t n_head,
                  int64_t n_head_kv, int64_t head_dim, int64_t n, float scale, int64_t h0, int64_t h1, float* out);

// Quantised cache (core/kv/codec_quant.cc): bits = 8, int8 rows of D; or bits = 4, packed nibbles (D/2
// bytes); ks / vs the per-row fp32 scales. Uses q·(s_t k̂_t) = s_t (q·k̂_t) and Σ p_t s_t v̂_t, so rows
// are never dequantised into memory.
void attend_paged_quant(const float* q, const KvPagedRows& k, const KvPagedRows& ks, const KvPagedRows& v, const KvPagedRows& vs,
                        int bits, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n, float scale,
                        int64_t h0, int64_t h1, float* out);

// Several query rows of one sequence at once (a prefill chunk): q[r] [H·D] attends positions [0, n[r]) into
// out[r]. Each K / V row is read once per group of rows; every row's result is bit-identical to
// attend_paged / attend_paged_quant on that row alone.
void attend_paged_rows(const float* const* q, const int64_t* n, int64_t n_rows, const KvPagedRows& k,
                       const KvPagedRows& v, c10::ScalarType kv_dtype, int64_t n_head, int64_t n_head_kv,
                       int64_t head_dim, float scale, int64_t h0, int64_t h1, float* const* out);
void attend_paged_quant_rows(const float* const* q, const int64_t* n, int64_t n_rows, const KvPagedRows& k,
                             const KvPagedRows& ks, const KvPagedRows& v, const KvPagedRows& vs, int bits,
                             int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale, int64_t h0, int64_t h1,
                             float* const* out);
// The portable per-row kernels (any head_dim, any ISA): the fallbacks of the above.
void attend_paged_generic(const float* q, const KvPagedRows& k, const KvPagedRows& v, c10::ScalarType kv_dtype,
                          int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n, float scale, int64_t h0,
                          int64_t h1, float* out);
void attend_paged_quant_generic(const float* q, const KvPagedRows& k, const KvPagedRows& ks, const KvPagedRows& v,
                                const KvPagedRows& vs, int bits, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                int64_t n, float scale, int64_t h0, int64_t h1, float* out);

// The portable kernels over positions [start, n) only (a sliding window; start 0: all), with the scores
// soft-capped as cap · tanh(s / cap) before the softmax when softcap > 0 (Gemma 2). start 0 and softcap 0 are
// the *_generic kernels above, bit for bit.
void attend_paged_span(const float* q, const KvPagedRows& k, const KvPagedRows& v, c10::ScalarType kv_dtype,
                       int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t start, int64_t n, float scale,
                       float softcap, int64_t h0, int64_t h1, float* out);
void attend_paged_quant_span(const float* q, const KvPagedRows& k, const KvPagedRows& ks, const KvPagedRows& v,
                             const KvPagedRows& vs, int bits, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                             int64_t start, int64_t n, float scale, float softcap, int64_t h0, int64_t h1, float* out);

// Contiguous [Hkv, t_max, D] caches, all heads (parallel over heads when worth it): the same kernels over
// one block. `scores` is unused (kept for callers that size it).
void attend_one(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale, float* scores,
                float* out);
void attend_one_quant(const float* q, const void* k, const float* ks, const void* v, const float* vs, int bits,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale,
                      float* scores, float* out);

// Reference: double accumulation, contiguous [Hkv, t_max, D] fp32 / fp16 / bf16 cache, all heads.
void attend_one_ref(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                    int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale, float* out);

// A per-thread float buffer of at least n elements (kernel scratch: scores, latent queries). Valid until
// the next call on the same thread.
float* thread_scratch(int64_t n);

}  // namespace frost::kernels
