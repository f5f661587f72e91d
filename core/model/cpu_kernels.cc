#include "core/model/cpu_kernels.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "core/kv/codec.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"

// GCC 12 reports false -Wmaybe-uninitialized inside its own avx512fintrin.h reductions
// (_mm512_reduce_add_ps uses an undefined-initialised register by design).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace frost::kernels {
namespace {

inline float bf16_to_f32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- weight loaders -----------------------------------------------------------------------
// One row kernel serves both weight dtypes; a loader turns stored weights into fp32.
struct F32Weights {
  using T = float;
  static float scalar(float v) { return v; }
};
struct Bf16Weights {
  using T = uint16_t;
  static float scalar(uint16_t v) { return bf16_to_f32(v); }
};

// Rows [r0, r1) of y = W x + b, portable (8 partial sums the compiler vectorises at the build's baseline).
template <class L>
void rows_generic(const typename L::T* w, const float* x, const float* b, float* y, int64_t r0, int64_t r1,
                  int64_t n_in) {
  for (int64_t r = r0; r < r1; ++r) {
    const typename L::T* w0 = w + r * n_in;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n_in; i += 8)
      for (int k = 0; k < 8; ++k) acc[k] += L::scalar(w0[i + k]) * x[i + k];
    float s = 0;
    for (; i < n_in; ++i) s += L::scalar(w0[i]) * x[i];
    for (float a : acc) s += a;
    y[r] = s + (b ? b[r] : 0.f);
  }
}

// ---- AVX-512, compiled for it whatever -march is and run only on CPUs that have it (kernels/cpu/isa.h).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")
struct F32Weights512 {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_masked(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct Bf16Weights512 {
  using T = uint16_t;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load_masked(const uint16_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

// 4 rows at a time so each x load is shared by 4 weight rows; the tail of a row uses masked loads.
template <class L>
void rows_avx512(const typename L::T* w, const float* x, const float* b, float* y, int64_t r0, int64_t r1,
                 int64_t n_in) {
  int64_t r = r0;
  const int64_t n16 = n_in & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (n_in - n16)) - 1u);
  for (; r + 4 <= r1; r += 4) {
    const typename L::T* w0 = w + r * n_in;
    const typename L::T* w1 = w0 + n_in;
    const typename L::T* w2 = w1 + n_in;
    const typename L::T* w3 = w2 + n_in;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
           a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i < n16; i += 16) {
      const __m512 xv = _mm512_loadu_ps(x + i);
      a0 = _mm512_fmadd_ps(L::load(w0 + i), xv, a0);
      a1 = _mm512_fmadd_ps(L::load(w1 + i), xv, a1);
      a2 = _mm512_fmadd_ps(L::load(w2 + i), xv, a2);
      a3 = _mm512_fmadd_ps(L::load(w3 + i), xv, a3);
    }
    if (tail) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + i);
      a0 = _mm512_fmadd_ps(L::load_masked(w0 + i, tail), xv, a0);
      a1 = _mm512_fmadd_ps(L::load_masked(w1 + i, tail), xv, a1);
      a2 = _mm512_fmadd_ps(L::load_masked(w2 + i, tail), xv, a2);
      a3 = _mm512_fmadd_ps(L::load_masked(w3 + i, tail), xv, a3);
    }
    y[r] = _mm512_reduce_add_ps(a0) + (b ? b[r] : 0.f);
    y[r + 1] = _mm512_reduce_add_ps(a1) + (b ? b[r + 1] : 0.f);
    y[r + 2] = _mm512_reduce_add_ps(a2) + (b ? b[r + 2] : 0.f);
    y[r + 3] = _mm512_reduce_add_ps(a3) + (b ? b[r + 3] : 0.f);
  }
  for (; r < r1; ++r) {
    const typename L::T* w0 = w + r * n_in;
    __m512 a0 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i < n16; i += 16) a0 = _mm512_fmadd_ps(L::load(w0 + i), _mm512_loadu_ps(x + i), a0);
    if (tail) a0 = _mm512_fmadd_ps(L::load_masked(w0 + i, tail), _mm512_maskz_loadu_ps(tail, x + i), a0);
    y[r] = _mm512_reduce_add_ps(a0) + (b ? b[r] : 0.f);
  }
}
#pragma GCC pop_options

}  // namespace

void matvec(const void* w, c10::ScalarType w_dtype, const float* x, const float* b, float* y,
            int64_t n_out, int64_t n_in) {
  // At least ~32K multiply-adds per task so small matrices stay on one thread.
  const int64_t grain = std::max<int64_t>(4, (int64_t{1} << 15) / std::max<int64_t>(n_in, 1));
  const bool avx512 = active_isa() == Isa::kAvx512;
  if (w_dtype == c10::kFloat) {
    const auto* wf = static_cast<const float*>(w);
    at::parallel_for(0, n_out, grain, [&](int64_t r0, int64_t r1) {
      avx512 ? rows_avx512<F32Weights512>(wf, x, b, y, r0, r1, n_in) : rows_generic<F32Weights>(wf, x, b, y, r0, r1, n_in);
    });
  } else if (w_dtype == c10::kBFloat16) {
    const auto* wb = static_cast<const uint16_t*>(w);
    at::parallel_for(0, n_out, grain, [&](int64_t r0, int64_t r1) {
      avx512 ? rows_avx512<Bf16Weights512>(wb, x, b, y, r0, r1, n_in)
             : rows_generic<Bf16Weights>(wb, x, b, y, r0, r1, n_in);
    });
  } else {
    TORCH_CHECK(false, "matvec: unsupported weight dtype ", w_dtype);
  }
}

void matvec_ref(const void* w, c10::ScalarType w_dtype, const float* x, const float* b, float* y,
                int64_t n_out, int64_t n_in) {
  for (int64_t o = 0; o < n_out; ++o) {
    double acc = b ? b[o] : 0.0;
    for (int64_t i = 0; i < n_in; ++i) {
      const float wv = w_dtype == c10::kFloat ? static_cast<const float*>(w)[o * n_in + i]
                                              : bf16_to_f32(static_cast<const uint16_t*>(w)[o * n_in + i]);
      acc += static_cast<double>(wv) * x[i];
    }
    y[o] = static_cast<float>(acc);
  }
}

}  // namespace frost::kernels

namespace frost {

void attend_all_heads(const KvCodec& cache, const float* q, int64_t n_head, int64_t head_dim, int64_t n,
                      float scale, float* out) {
  // Parallel over heads only when there is enough work to pay for waking the pool.
  if (n * head_dim * n_head < (int64_t{1} << 15)) {
    cache.attend(q, n_head, n, scale, 0, n_head, out);
  } else {
    kernels::parallel_tasks(n_head, [&](int64_t h) { cache.attend(q, n_head, n, scale, h, h + 1, out); });
  }
}

}  // namespace frost
