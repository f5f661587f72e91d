#include "core/model/cpu_kernels.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

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
// One row kernel serves both weight dtypes; a loader turns 16 stored weights into fp32 lanes.
struct F32Weights {
  using T = float;
  static float scalar(float v) { return v; }
#if defined(__AVX512F__)
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_masked(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
#endif
};

struct Bf16Weights {
  using T = uint16_t;
  static float scalar(uint16_t v) { return bf16_to_f32(v); }
#if defined(__AVX512F__)
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load_masked(const uint16_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
#endif
};

// Rows [r0, r1) of y = W x + b. The AVX-512 path computes 4 rows at a time so each x load is
// shared by 4 weight rows; the tail of a row uses masked loads.
template <class L>
void rows(const typename L::T* w, const float* x, const float* b, float* y, int64_t r0, int64_t r1,
          int64_t n_in) {
  int64_t r = r0;
#if defined(__AVX512F__)
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
#else
  for (; r < r1; ++r) {
    const typename L::T* w0 = w + r * n_in;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n_in; i += 8)
      for (int k = 0; k < 8; ++k) acc[k] += L::scalar(w0[i + k]) * x[i + k];  // vectorised by the compiler
    float s = 0;
    for (; i < n_in; ++i) s += L::scalar(w0[i]) * x[i];
    for (float a : acc) s += a;
    y[r] = s + (b ? b[r] : 0.f);
  }
#endif
}

template <typename T>
inline float load_elem(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}

#if defined(__AVX512F__)
// 16 stored K/V values → fp32 lanes.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const c10::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 load16(const c10::BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#endif

// q·k. AVX-512 when d is a multiple of 16 (head_dim 16/32/48/64/128...), else 16 independent
// partial sums, so the compiler vectorises it without -ffast-math.
template <typename T>
inline float dot(const float* q, const T* k, int64_t d) {
#if defined(__AVX512F__)
  if (d % 16 == 0) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < d; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(k + i), acc);
    return _mm512_reduce_add_ps(acc);
  }
#endif
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= d; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += q[i + j] * load_elem(k, i + j);
  float s = 0;
  for (; i < d; ++i) s += q[i] * load_elem(k, i);
  for (float a : acc) s += a;
  return s;
}

// o += p · v over d elements.
template <typename T>
inline void axpy(float p, const T* v, float* o, int64_t d) {
#if defined(__AVX512F__)
  if (d % 16 == 0) {
    const __m512 pv = _mm512_set1_ps(p);
    for (int64_t i = 0; i < d; i += 16)
      _mm512_storeu_ps(o + i, _mm512_fmadd_ps(pv, load16(v + i), _mm512_loadu_ps(o + i)));
    return;
  }
#endif
  for (int64_t i = 0; i < d; ++i) o[i] += p * load_elem(v, i);
}

// s[t] ← exp(s[t] − mx) over the n scores of one head (mx = their maximum); returns 1 / Σ s, the
// factor that turns them into softmax probabilities.
inline float softmax_unnormalised(float* s, int64_t n, float mx) {
  float sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    s[t] = std::exp(s[t] - mx);
    sum += s[t];
  }
  return 1.f / sum;
}

// Parallel over heads only when there is enough work to pay for waking the pool.
inline int64_t attend_grain(int64_t n, int64_t head_dim, int64_t n_head) {
  return n * head_dim * n_head < (int64_t{1} << 15) ? n_head : 1;
}

template <typename T>
void attend_heads(const float* q, const T* k, const T* v, int64_t h0, int64_t h1, int64_t n_head,
                  int64_t n_head_kv, int64_t d, int64_t t_max, int64_t n, float scale, float* scores,
                  float* out) {
  const int64_t group = n_head / n_head_kv;
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t g = h / group;
    const float* qh = q + h * d;
    const T* kg = k + g * t_max * d;
    const T* vg = v + g * t_max * d;
    float* s = scores + h * n;
    // scores: s[t] = scale · q·K[t]
    float mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) {
      s[t] = dot(qh, kg + t * d, d) * scale;
      mx = std::max(mx, s[t]);
    }
    const float inv = softmax_unnormalised(s, n, mx);
    // out = Σ p_t V[t]
    float* o = out + h * d;
    for (int64_t i = 0; i < d; ++i) o[i] = 0;
    for (int64_t t = 0; t < n; ++t) axpy(s[t] * inv, vg + t * d, o, d);
  }
}

// One quantised row as floats (the integer values; the scale is applied by the caller).
inline void unpack_row(const void* base, int bits, int64_t row, int64_t d, float* dst) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (d % 16 == 0) {
    if (bits == 8) {
      const int8_t* r = static_cast<const int8_t*>(base) + row * d;
      for (int64_t i = 0; i < d; i += 16) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + i));
        _mm512_storeu_ps(dst + i, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)));
      }
    } else {
      const uint8_t* r = static_cast<const uint8_t*>(base) + row * (d / 2);
      const __m128i low4 = _mm_set1_epi8(0x0F);
      const __m512i eight = _mm512_set1_epi32(8);
      for (int64_t i = 0; i < d; i += 16) {
        // 8 bytes → 16 nibbles in element order (low nibble first), then sign-extend: (x ^ 8) − 8.
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + i / 2));
        const __m128i lo = _mm_and_si128(b, low4);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
        const __m512i x = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
        const __m512i v = _mm512_sub_epi32(_mm512_xor_si512(x, eight), eight);
        _mm512_storeu_ps(dst + i, _mm512_cvtepi32_ps(v));
      }
    }
    return;
  }
#endif
  if (bits == 8) {
    const int8_t* r = static_cast<const int8_t*>(base) + row * d;
    for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<float>(r[i]);
  } else {
    const uint8_t* r = static_cast<const uint8_t*>(base) + row * (d / 2);
    for (int64_t j = 0; j < d / 2; ++j) {
      const int lo = r[j] & 0xF, hi = r[j] >> 4;
      dst[2 * j] = static_cast<float>(lo >= 8 ? lo - 16 : lo);
      dst[2 * j + 1] = static_cast<float>(hi >= 8 ? hi - 16 : hi);
    }
  }
}

}  // namespace

void attend_one_quant(const float* q, const void* k, const float* ks, const void* v, const float* vs, int bits,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale,
                      float* scores, float* out) {
  TORCH_CHECK(bits == 8 || (bits == 4 && head_dim % 2 == 0), "attend_one_quant: bits ", bits, ", head_dim ",
              head_dim);
  const int64_t group = n_head / n_head_kv;
  at::parallel_for(0, n_head, attend_grain(n, head_dim, n_head), [&](int64_t h0, int64_t h1) {
    std::vector<float> row(static_cast<size_t>(head_dim));
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t g = h / group;
      const float* qh = q + h * head_dim;
      float* s = scores + h * n;
      float mx = -INFINITY;
      for (int64_t t = 0; t < n; ++t) {
        const int64_t r = g * t_max + t;
        unpack_row(k, bits, r, head_dim, row.data());
        s[t] = dot(qh, row.data(), head_dim) * ks[r] * scale;
        mx = std::max(mx, s[t]);
      }
      const float inv = softmax_unnormalised(s, n, mx);
      float* o = out + h * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) o[i] = 0;
      for (int64_t t = 0; t < n; ++t) {
        const int64_t r = g * t_max + t;
        unpack_row(v, bits, r, head_dim, row.data());
        axpy(s[t] * inv * vs[r], row.data(), o, head_dim);
      }
    }
  });
}

void matvec(const void* w, c10::ScalarType w_dtype, const float* x, const float* b, float* y,
            int64_t n_out, int64_t n_in) {
  // At least ~32K multiply-adds per task so small matrices stay on one thread.
  const int64_t grain = std::max<int64_t>(4, (int64_t{1} << 15) / std::max<int64_t>(n_in, 1));
  if (w_dtype == c10::kFloat) {
    const auto* wf = static_cast<const float*>(w);
    at::parallel_for(0, n_out, grain, [&](int64_t r0, int64_t r1) { rows<F32Weights>(wf, x, b, y, r0, r1, n_in); });
  } else if (w_dtype == c10::kBFloat16) {
    const auto* wb = static_cast<const uint16_t*>(w);
    at::parallel_for(0, n_out, grain, [&](int64_t r0, int64_t r1) { rows<Bf16Weights>(wb, x, b, y, r0, r1, n_in); });
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

void attend_one(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale, float* scores,
                float* out) {
  at::parallel_for(0, n_head, attend_grain(n, head_dim, n_head), [&](int64_t h0, int64_t h1) {
    switch (kv_dtype) {
      case c10::kFloat:
        attend_heads(q, static_cast<const float*>(k), static_cast<const float*>(v), h0, h1, n_head, n_head_kv,
                     head_dim, t_max, n, scale, scores, out);
        break;
      case c10::kHalf:
        attend_heads(q, static_cast<const c10::Half*>(k), static_cast<const c10::Half*>(v), h0, h1, n_head,
                     n_head_kv, head_dim, t_max, n, scale, scores, out);
        break;
      case c10::kBFloat16:
        attend_heads(q, static_cast<const c10::BFloat16*>(k), static_cast<const c10::BFloat16*>(v), h0, h1,
                     n_head, n_head_kv, head_dim, t_max, n, scale, scores, out);
        break;
      default:
        TORCH_CHECK(false, "attend_one: unsupported kv dtype ", kv_dtype);
    }
  });
}

void attend_one_ref(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                    int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale, float* out) {
  auto elem = [&](const void* base, int64_t idx) -> double {
    switch (kv_dtype) {
      case c10::kFloat: return static_cast<const float*>(base)[idx];
      case c10::kHalf: return static_cast<float>(static_cast<const c10::Half*>(base)[idx]);
      case c10::kBFloat16: return static_cast<float>(static_cast<const c10::BFloat16*>(base)[idx]);
      default: TORCH_CHECK(false, "attend_one_ref: unsupported kv dtype ", kv_dtype);
    }
  };
  const int64_t group = n_head / n_head_kv;
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t g = h / group;
    double mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) {
      double acc = 0;
      for (int64_t i = 0; i < head_dim; ++i) acc += q[h * head_dim + i] * elem(k, (g * t_max + t) * head_dim + i);
      s[t] = acc * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0;
    for (int64_t t = 0; t < n; ++t) sum += (s[t] = std::exp(s[t] - mx));
    for (int64_t i = 0; i < head_dim; ++i) {
      double acc = 0;
      for (int64_t t = 0; t < n; ++t) acc += s[t] / sum * elem(v, (g * t_max + t) * head_dim + i);
      out[h * head_dim + i] = static_cast<float>(acc);
    }
  }
}

}  // namespace frost::kernels
