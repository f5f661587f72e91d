#include "core/kv/attend.h"

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

// GCC 12 reports false -Wmaybe-uninitialized inside its own avx512fintrin.h reductions.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace frost::kernels {
namespace {

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
void attend_heads(const float* q, const KvPagedRows& k, const KvPagedRows& v, int64_t n_head, int64_t n_head_kv, int64_t d,
                  int64_t n, float scale, int64_t h0, int64_t h1, float* out) {
  const int64_t group = n_head / n_head_kv;
  float* s = thread_scratch(n);
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t g = h / group;
    const float* qh = q + h * d;
    // scores: s[t] = scale · q·K[t]
    float mx = -INFINITY;
    k.for_runs(g, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const T* kr = reinterpret_cast<const T*>(p);
      for (int64_t i = 0; i < cnt; ++i) {
        const float sc = dot(qh, kr + i * d, d) * scale;
        s[t0 + i] = sc;
        mx = std::max(mx, sc);
      }
    });
    const float inv = softmax_unnormalised(s, n, mx);
    // out = Σ p_t V[t]
    float* o = out + h * d;
    for (int64_t i = 0; i < d; ++i) o[i] = 0;
    v.for_runs(g, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const T* vr = reinterpret_cast<const T*>(p);
      for (int64_t i = 0; i < cnt; ++i) axpy(s[t0 + i] * inv, vr + i * d, o, d);
    });
  }
}

// One quantised row as floats (the integer values; the scale is applied by the caller).
inline void unpack_row(const uint8_t* row, int bits, int64_t d, float* dst) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if (d % 16 == 0) {
    if (bits == 8) {
      const int8_t* r = reinterpret_cast<const int8_t*>(row);
      for (int64_t i = 0; i < d; i += 16) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + i));
        _mm512_storeu_ps(dst + i, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)));
      }
    } else {
      const __m128i low4 = _mm_set1_epi8(0x0F);
      const __m512i eight = _mm512_set1_epi32(8);
      for (int64_t i = 0; i < d; i += 16) {
        // 8 bytes → 16 nibbles in element order (low nibble first), then sign-extend: (x ^ 8) − 8.
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i / 2));
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
    const int8_t* r = reinterpret_cast<const int8_t*>(row);
    for (int64_t i = 0; i < d; ++i) dst[i] = static_cast<float>(r[i]);
  } else {
    for (int64_t j = 0; j < d / 2; ++j) {
      const int lo = row[j] & 0xF, hi = row[j] >> 4;
      dst[2 * j] = static_cast<float>(lo >= 8 ? lo - 16 : lo);
      dst[2 * j + 1] = static_cast<float>(hi >= 8 ? hi - 16 : hi);
    }
  }
}

// Contiguous [Hkv, t_max, row] storage as a one-block KvPagedRows.
KvPagedRows one_block(const void* base, int64_t t_max, int64_t row_bytes, const int32_t* zero) {
  KvPagedRows r;
  r.base = static_cast<const uint8_t*>(base);
  r.table = zero;
  r.block_bytes = 0;
  r.block_tokens = t_max;
  r.off = 0;
  r.row_bytes = row_bytes;
  return r;
}

}  // namespace

float* thread_scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(std::max<int64_t>(n, 1024)));
  return buf.data();
}

void attend_paged(const float* q, const KvPagedRows& k, const KvPagedRows& v, c10::ScalarType kv_dtype, int64_t n_head,
                  int64_t n_head_kv, int64_t head_dim, int64_t n, float scale, int64_t h0, int64_t h1,
                  float* out) {
  switch (kv_dtype) {
    case c10::kFloat:
      return attend_heads<float>(q, k, v, n_head, n_head_kv, head_dim, n, scale, h0, h1, out);
    case c10::kHalf:
      return attend_heads<c10::Half>(q, k, v, n_head, n_head_kv, head_dim, n, scale, h0, h1, out);
    case c10::kBFloat16:
      return attend_heads<c10::BFloat16>(q, k, v, n_head, n_head_kv, head_dim, n, scale, h0, h1, out);
    default:
      TORCH_CHECK(false, "attend_paged: unsupported kv dtype ", kv_dtype);
  }
}

void attend_paged_quant(const float* q, const KvPagedRows& k, const KvPagedRows& ks, const KvPagedRows& v, const KvPagedRows& vs,
                        int bits, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n, float scale,
                        int64_t h0, int64_t h1, float* out) {
  TORCH_CHECK(bits == 8 || (bits == 4 && head_dim % 2 == 0), "attend_paged_quant: bits ", bits, ", head_dim ",
              head_dim);
  const int64_t group = n_head / n_head_kv;
  float* s = thread_scratch(n + head_dim);
  float* row = s + n;
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t g = h / group;
    const float* qh = q + h * head_dim;
    float mx = -INFINITY;
    // K rows and their scales sit in the same block at the same row index: walk both runs together.
    k.for_runs(g, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const float* sc = reinterpret_cast<const float*>(ks.row(g, t0));
      for (int64_t i = 0; i < cnt; ++i) {
        unpack_row(p + i * k.row_bytes, bits, head_dim, row);
        const float x = dot(qh, row, head_dim) * sc[i] * scale;
        s[t0 + i] = x;
        mx = std::max(mx, x);
      }
    });
    const float inv = softmax_unnormalised(s, n, mx);
    float* o = out + h * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) o[i] = 0;
    v.for_runs(g, n, [&](const uint8_t* p, int64_t t0, int64_t cnt) {
      const float* sc = reinterpret_cast<const float*>(vs.row(g, t0));
      for (int64_t i = 0; i < cnt; ++i) {
        unpack_row(p + i * v.row_bytes, bits, head_dim, row);
        axpy(s[t0 + i] * inv * sc[i], row, o, head_dim);
      }
    });
  }
}

void attend_one(const float* q, const void* k, const void* v, c10::ScalarType kv_dtype, int64_t n_head,
                int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale,
                float* /*scores*/, float* out) {
  static const int32_t zero = 0;
  const int64_t rb = head_dim * static_cast<int64_t>(c10::elementSize(kv_dtype));
  const KvPagedRows kr = one_block(k, t_max, rb, &zero), vr = one_block(v, t_max, rb, &zero);
  at::parallel_for(0, n_head, attend_grain(n, head_dim, n_head), [&](int64_t h0, int64_t h1) {
    attend_paged(q, kr, vr, kv_dtype, n_head, n_head_kv, head_dim, n, scale, h0, h1, out);
  });
}

void attend_one_quant(const float* q, const void* k, const float* ks, const void* v, const float* vs, int bits,
                      int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t t_max, int64_t n, float scale,
                      float* /*scores*/, float* out) {
  static const int32_t zero = 0;
  const int64_t rb = bits == 8 ? head_dim : head_dim / 2;
  const KvPagedRows kr = one_block(k, t_max, rb, &zero), vr = one_block(v, t_max, rb, &zero);
  const KvPagedRows ksr = one_block(ks, t_max, 4, &zero), vsr = one_block(vs, t_max, 4, &zero);
  at::parallel_for(0, n_head, attend_grain(n, head_dim, n_head), [&](int64_t h0, int64_t h1) {
    attend_paged_quant(q, kr, ksr, vr, vsr, bits, n_head, n_head_kv, head_dim, n, scale, h0, h1, out);
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
