#pragma once
// exp for softmax numerators, p_i = exp((l_i − l_max) · inv_t): the sampler over a whole vocabulary
// (core/generate/sampler.cc) and the attention kernels over a row's scores (core/kv/attend.cc).
//
// exp is our own: x ≤ 0 is reduced as x = n·ln2 + r (n = round(x·log2 e), two-constant Cody–Waite
// subtraction), e^r by Cephes' degree-5 polynomial in Horner form with fused multiply-adds, then scaled by
// 2^n through the exponent bits; x < −87.3 (below the normal range) gives 0. Relative error < 2e-7. The scalar
// function and the AVX-512 loop run the same fp32 operations in the same order, so they agree bit for bit —
// a seeded request draws the same tokens whatever the CPU, and without depending on the C library's expf.
#include <cmath>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "kernels/cpu/isa.h"

namespace frost::softmax {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kMinX = -87.3f;
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                       kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// exp(x) for x <= 0 (NaN and -inf give 0).
inline float exp_nonpositive(float x) {
  if (!(x >= kMinX)) return 0.f;
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = std::fma(kP0, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  const float rr = r * r;
  float y = std::fma(p, rr, r);
  y = y + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

// out[i] = exp_nonpositive((l[i] − l_max) · inv_t) for i < n (l_max >= every l[i], finite; inv_t finite).
// The AVX-512 form (16 lanes at a time, the same operations) runs where the CPU has it (kernels/cpu/isa.h):
// exp_shifted() chooses; AVX-512 kernels call exp_shifted_avx512() directly.
inline void exp_shifted_scalar(const float* l, int64_t n, float l_max, float inv_t, float* out, int64_t i = 0) {
  for (; i < n; ++i) out[i] = exp_nonpositive((l[i] - l_max) * inv_t);
}

// SwiGLU of one row (LLaMA's MLP): act[i] = silu(g[i]) · u[i] = g[i] / (1 + exp(−g[i])) · u[i], i < F, with
// exp(−g) from the same reduction and polynomial (any sign: |g| up to the fp32 range; beyond ±87 the
// factor saturates to 0 or g as it should). Scalar and AVX-512 forms bit-identical.
inline float exp_any(float x) {
  if (!(x <= 88.7f)) return x != x ? x : INFINITY;  // NaN stays NaN
  if (x < kMinX) return 0.f;
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = std::fma(kP0, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  const float rr = r * r;
  float y = std::fma(p, rr, r);
  y = y + 1.f;
  // 2^n as two factors so n = 128 (x near 88.7) stays finite in the intermediate
  const int32_t n1 = static_cast<int32_t>(n) / 2, n2 = static_cast<int32_t>(n) - n1;
  const int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof(s1));
  std::memcpy(&s2, &b2, sizeof(s2));
  return (y * s1) * s2;
}

inline void swiglu_scalar(const float* g, const float* u, int64_t n, float* act, int64_t i = 0) {
  for (; i < n; ++i) act[i] = g[i] / (1.f + exp_any(-g[i])) * u[i];
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")
inline void exp_shifted_avx512(const float* l, int64_t n, float l_max, float inv_t, float* out) {
  int64_t i = 0;
  const __m512 vmax = _mm512_set1_ps(l_max), vinv = _mm512_set1_ps(inv_t), vmin = _mm512_set1_ps(kMinX);
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(l + i), vmax), vinv);
    const __mmask16 ok = _mm512_cmp_ps_mask(x, vmin, _CMP_GE_OQ);  // false for NaN and below the range
    const __m512 nn = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(nn, _mm512_set1_ps(-kLn2Hi), x);
    r = _mm512_fmadd_ps(nn, _mm512_set1_ps(-kLn2Lo), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kP0), r, _mm512_set1_ps(kP1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
    const __m512 rr = _mm512_mul_ps(r, r);
    __m512 y = _mm512_fmadd_ps(p, rr, r);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(nn), _mm512_set1_epi32(127)), 23);
    _mm512_storeu_ps(out + i, _mm512_maskz_mul_ps(ok, y, _mm512_castsi512_ps(e)));
  }
  exp_shifted_scalar(l, n, l_max, inv_t, out, i);
}

inline void swiglu_avx512(const float* g, const float* u, int64_t n, float* act) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.f);
  for (; i + 16 <= n; i += 16) {
    const __m512 gv = _mm512_loadu_ps(g + i);
    const __m512 x = _mm512_sub_ps(_mm512_setzero_ps(), gv);  // −g
    const __mmask16 lo = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kMinX), _CMP_LT_OQ);
    const __mmask16 hi = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.7f), _CMP_GT_OQ);
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kMinX)), _mm512_set1_ps(88.7f));
    const __m512 nn = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kLog2e)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(nn, _mm512_set1_ps(-kLn2Hi), xc);
    r = _mm512_fmadd_ps(nn, _mm512_set1_ps(-kLn2Lo), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kP0), r, _mm512_set1_ps(kP1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
    const __m512 rr = _mm512_mul_ps(r, r);
    __m512 y = _mm512_fmadd_ps(p, rr, r);
    y = _mm512_add_ps(y, one);
    const __m512i ni = _mm512_cvtps_epi32(nn);
    const __m512i n1 = _mm512_srai_epi32(_mm512_add_epi32(ni, _mm512_srli_epi32(ni, 31)), 1);  // n / 2, toward 0
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i b1 = _mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23);
    const __m512i b2 = _mm512_slli_epi32(_mm512_add_epi32(n2, _mm512_set1_epi32(127)), 23);
    __m512 e = _mm512_mul_ps(_mm512_mul_ps(y, _mm512_castsi512_ps(b1)), _mm512_castsi512_ps(b2));
    e = _mm512_mask_mov_ps(e, lo, _mm512_setzero_ps());
    e = _mm512_mask_mov_ps(e, hi, _mm512_set1_ps(INFINITY));
    // NaN inputs: −g is NaN, neither mask set; the clamp turned it into a number, so put the NaN back
    e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
    const __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(one, e));
    _mm512_storeu_ps(act + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
  }
  swiglu_scalar(g, u, n, act, i);
}
#pragma GCC pop_options

inline void exp_shifted(const float* l, int64_t n, float l_max, float inv_t, float* out) {
  if (kernels::active_isa() == kernels::Isa::kAvx512) return exp_shifted_avx512(l, n, l_max, inv_t, out);
  exp_shifted_scalar(l, n, l_max, inv_t, out);
}

inline void swiglu(const float* g, const float* u, int64_t n, float* act) {
  if (kernels::active_isa() == kernels::Isa::kAvx512) return swiglu_avx512(g, u, n, act);
  swiglu_scalar(g, u, n, act);
}

}  // namespace frost::softmax
