// The packed GEMM's AVX2 variant (x86-64-v3 machines; AVX-512 ones run it for W8A8 when they lack VNNI): its
// weight loaders (32 weights of an input in four ymm), the 2-row register tiles, and the W8A8 tiles on
// VPMADDUBSW. Every function here that uses AVX2 carries its target attribute; the file compiles at the
// x86-64 baseline (gemm_panel.h says why). The driver is gemm.cc.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_panel.h"

#define FROST_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace frost::kernels::gemm_detail {
namespace {
namespace avx2 {

// As gemm_avx512.cc's, with the 32 weights of input k in four 8-lane registers.
struct F32 {
  const float* w;
  int64_t group;
  explicit F32(const Panel& p) : w(static_cast<const float*>(p.w)), group(p.group) {}
  FROST_AVX2 void begin(int64_t) {}
  FROST_AVX2 void load(int64_t k, __m256 v[4]) const {
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(w + k * kPanel + 8 * i);
  }
};
struct BF16 {
  const uint16_t* w;
  int64_t group;
  explicit BF16(const Panel& p) : w(static_cast<const uint16_t*>(p.w)), group(p.group) {}
  FROST_AVX2 void begin(int64_t) {}
  FROST_AVX2 void load(int64_t k, __m256 v[4]) const {
    for (int i = 0; i < 4; ++i) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k * kPanel + 8 * i));
      v[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
};
struct Q8 {
  const int8_t* w;
  const float* scales;
  int64_t group;
  explicit Q8(const Panel& p) : w(static_cast<const int8_t*>(p.w)), scales(p.scales), group(p.group) {}
  const float* s = nullptr;
  FROST_AVX2 void begin(int64_t g) { s = scales + g * kPanel; }
  FROST_AVX2 void load(int64_t k, __m256 v[4]) const {
    for (int i = 0; i < 4; ++i) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + k * kPanel + 8 * i));
      v[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_loadu_ps(s + 8 * i));
    }
  }
};
struct Q4 {
  const uint8_t* w;
  const float* scales;
  const float* mins;
  int64_t group;
  explicit Q4(const Panel& p)
      : w(static_cast<const uint8_t*>(p.w)), scales(p.scales), mins(p.mins), group(p.group) {}
  const float* s = nullptr;
  const float* m = nullptr;
  FROST_AVX2 void begin(int64_t g) {
    s = scales + g * kPanel;
    m = mins + g * kPanel;
  }
  FROST_AVX2 void load(int64_t k, __m256 v[4]) const {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k * (kPanel / 2)));
    const __m128i nib = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, nib), hi = _mm_and_si128(_mm_srli_epi16(b, 4), nib);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};  // outputs 0-7 … 24-31
    for (int i = 0; i < 4; ++i)
      v[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[i])), _mm256_loadu_ps(s + 8 * i),
                             _mm256_loadu_ps(m + 8 * i));
  }
};

struct Loaders {  // for run_panel (gemm_panel.h)
  using F32 = avx2::F32;
  using BF16 = avx2::BF16;
  using Q8 = avx2::Q8;
  using Q4 = avx2::Q4;
};

template <int R, class L>
FROST_AVX2 void tile(L l, const float* x, int64_t ldx, int64_t n_in, const float* b, float* y, int64_t ldy,
                     int64_t n_cols) {
  __m256 a[R][4];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps();
  for (int64_t k0 = 0, g = 0; k0 < n_in; k0 += l.group, ++g) {
    l.begin(g);
    const int64_t k1 = std::min(n_in, k0 + l.group);
    for (int64_t k = k0; k < k1; ++k) {
      __m256 w[4];
      l.load(k, w);
      for (int r = 0; r < R; ++r) {
        const __m256 xb = _mm256_set1_ps(x[r * ldx + k]);
        for (int i = 0; i < 4; ++i) a[r][i] = _mm256_fmadd_ps(xb, w[i], a[r][i]);
      }
    }
  }
  alignas(32) float tmp[kPanel];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < 4; ++i) _mm256_store_ps(tmp + 8 * i, a[r][i]);
    store_row(tmp, b, y + r * ldy, n_cols);
  }
}

// Two rows per tile: 2·4 accumulators + 4 weights + 1 broadcast of 16 ymm.
template <class L>
FROST_AVX2 void panel_rows(L l, const float* x, int64_t ldx, int64_t n_rows, int64_t n_in, const float* b,
                           float* y, int64_t ldy, int64_t n_cols) {
  int64_t r = 0;
  for (; r + 2 <= n_rows; r += 2) tile<2>(l, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r < n_rows; ++r) tile<1>(l, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
}

template <class L>
FROST_AVX2 void dequant_panel(L l, int64_t n_in, float* out) {
  for (int64_t k0 = 0, g = 0; k0 < n_in; k0 += l.group, ++g) {
    l.begin(g);
    for (int64_t k = k0; k < std::min(n_in, k0 + l.group); ++k) {
      __m256 v[4];
      l.load(k, v);
      for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + k * kPanel + 8 * i, v[i]);
    }
  }
}

// W8A8 without VNNI (AVX2 machines, and AVX-512 ones without VNNI): the weight bytes back to signed (xor
// 0x80), then VPMADDUBSW on |x| and w with x's sign (|x|, |w| <= 127: a pair sums to at most 32,258, so the
// int16 never saturates) and VPMADDWD by 1: the same exact Σ q·w per group as VPDPBUSD minus its correction.
template <int R>
FROST_AVX2 void tile_a8(const Panel& p, const ActA8& a, int64_t n_in4, const float* b, float* y, int64_t ldy,
                        int64_t n_cols) {
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 f[R][4];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < 4; ++t) f[r][t] = _mm256_setzero_ps();
  for (int64_t k0 = 0, g = 0; k0 < n_in4; k0 += p.group, ++g) {
    __m256i is[R][4];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < 4; ++t) is[r][t] = _mm256_setzero_si256();
    const int64_t k1 = std::min(n_in4, k0 + p.group);
    for (int64_t k = k0; k < k1; k += 4) {
      __m256i wv[4];
      for (int t = 0; t < 4; ++t)
        wv[t] = _mm256_xor_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k * kPanel + 32 * t)), flip);
      for (int r = 0; r < R; ++r) {
        int32_t xv;
        std::memcpy(&xv, a.q + r * a.ldq + k, sizeof(xv));
        const __m256i xb = _mm256_set1_epi32(xv), ax = _mm256_abs_epi8(xb);
        for (int t = 0; t < 4; ++t)
          is[r][t] = _mm256_add_epi32(
              is[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[t], xb)), ones));
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 xs = _mm256_set1_ps(a.xs[r * a.lds + g]);
      for (int t = 0; t < 4; ++t)
        f[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][t]),
                                  _mm256_mul_ps(xs, _mm256_loadu_ps(p.scales + g * kPanel + 8 * t)), f[r][t]);
    }
  }
  alignas(32) float tmp[kPanel];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < 4; ++t) _mm256_store_ps(tmp + 8 * t, f[r][t]);
    store_row(tmp, b, y + r * ldy, n_cols);
  }
}

}  // namespace avx2
}  // namespace

void panel_avx2(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr,
                const float* b, float* y, int64_t ldy, int64_t nc) {
  run_panel<avx2::Loaders>(w, p, x, ldx, nr, b, y, ldy, nc);
}

FROST_AVX2 void panel_rows_a8_avx2(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4,
                                   const float* b, float* y, int64_t ldy, int64_t n_cols) {
  int64_t r = 0;
  for (; r + 2 <= n_rows; r += 2) avx2::tile_a8<2>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
  for (; r < n_rows; ++r) avx2::tile_a8<1>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
}

}  // namespace frost::kernels::gemm_detail
