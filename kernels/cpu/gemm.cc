#include "kernels/cpu/gemm.h"

#include <c10/util/Exception.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/parallel.h"

// GCC 12 reports false -Wmaybe-uninitialized inside its own avx512fintrin.h helpers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Every variant is compiled in this one translation unit at the build's baseline; the SIMD ones carry
// per-function target attributes, so a binary built anywhere runs everywhere and picks its variant at run
// time (kernels/cpu/isa.h). Nothing here is inline-shared with other translation units, so no AVX-512 code
// can leak into a baseline caller.
#define FROST_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define FROST_AVX2 __attribute__((target("avx2,fma,f16c")))
#define FROST_AVX512_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace frost::kernels {
namespace {

constexpr int64_t kPanel = 32;      // output columns per panel
constexpr int64_t kRowBlock = 96;   // activation rows per task (a multiple of every tile height)
constexpr int64_t kDirectRows = 4;  // quantized: up to this many rows dequantize in registers

// One panel as the loaders see it.
struct Panel {
  const void* w = nullptr;          // f32 / bf16 / int8: [n_in][32]; int4: [n_in][16] bytes
  const float* scales = nullptr;    // [n_groups][32]
  const float* mins = nullptr;      // [n_groups][32]
  int64_t group = 0;                // inputs per scale
  const void* next = nullptr;       // fp32: the panel this thread runs next (prefetched), or null
};

inline float bf16_to_f32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// W8A8: the quantized activation rows a panel kernel reads (gemm.h): q [rows][ldq] int8, per row and group the
// scale xs and 128·Σq (what VPDPBUSD's unsigned weights add), [rows][lds].
struct ActA8 {
  const int8_t* q = nullptr;
  int64_t ldq = 0;
  const float* xs = nullptr;
  const int32_t* qsum128 = nullptr;
  int64_t lds = 0;
  ActA8 at_row(int64_t r) const { return {q + r * ldq, ldq, xs + r * lds, qsum128 + r * lds, lds}; }
};

inline int64_t round_up4(int64_t n) { return (n + 3) / 4 * 4; }

// Stores n valid columns (<= 32) of a tile row: y[c] = acc[c] + b[c].
inline void store_row(const float* acc, const float* b, float* y, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] = b ? acc[c] + b[c] : acc[c];
}

// ------------------------------------------------------------------------------------------------ scalar
namespace scalar {

// The weight (o = column c of the panel, input k) as fp32, for each format.
struct F32 {
  static float get(const Panel& p, int64_t k, int64_t c) { return static_cast<const float*>(p.w)[k * kPanel + c]; }
};
struct BF16 {
  static float get(const Panel& p, int64_t k, int64_t c) {
    return bf16_to_f32(static_cast<const uint16_t*>(p.w)[k * kPanel + c]);
  }
};
struct Q8 {
  static float get(const Panel& p, int64_t k, int64_t c) {
    return static_cast<float>(static_cast<const int8_t*>(p.w)[k * kPanel + c]) * p.scales[(k / p.group) * kPanel + c];
  }
};
struct Q4 {
  static float get(const Panel& p, int64_t k, int64_t c) {
    const uint8_t b = static_cast<const uint8_t*>(p.w)[k * (kPanel / 2) + (c & 15)];
    const int v = c < 16 ? (b & 0xF) : (b >> 4);
    const int64_t g = (k / p.group) * kPanel + c;
    return std::fma(static_cast<float>(v), p.scales[g], p.mins[g]);
  }
};

template <class L>
void panel_rows(const Panel& p, const float* x, int64_t ldx, int64_t n_rows, int64_t n_in, const float* b, float* y,
                int64_t ldy, int64_t n_cols) {
  float acc[kPanel];
  for (int64_t r = 0; r < n_rows; ++r) {
    std::fill(acc, acc + kPanel, 0.f);
    for (int64_t k = 0; k < n_in; ++k) {
      const float xv = x[r * ldx + k];
      for (int64_t c = 0; c < kPanel; ++c) acc[c] = std::fma(xv, L::get(p, k, c), acc[c]);
    }
    store_row(acc, b, y + r * ldy, n_cols);
  }
}

template <class L>
void dequant_panel(const Panel& p, int64_t n_in, float* out) {
  for (int64_t k = 0; k < n_in; ++k)
    for (int64_t c = 0; c < kPanel; ++c) out[k * kPanel + c] = L::get(p, k, c);
}

// W8A8, on the packed layout: exact int32 sums per group, then the fp32 epilogue of gemm.h.
inline void panel_rows_a8(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4, const float* b, float* y,
                          int64_t ldy, int64_t n_cols) {
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
  float acc[kPanel];
  int32_t is[kPanel];
  for (int64_t r = 0; r < n_rows; ++r) {
    std::fill(acc, acc + kPanel, 0.f);
    const int8_t* q = a.q + r * a.ldq;
    for (int64_t k0 = 0, g = 0; k0 < n_in4; k0 += p.group, ++g) {
      std::fill(is, is + kPanel, 0);
      for (int64_t k = k0; k < std::min(n_in4, k0 + p.group); ++k) {
        const int32_t xv = q[k];
        const uint8_t* wk = w + (k / 4) * 4 * kPanel + (k % 4);
        for (int64_t c = 0; c < kPanel; ++c) is[c] += xv * (static_cast<int32_t>(wk[4 * c]) - 128);
      }
      const float xs = a.xs[r * a.lds + g];
      for (int64_t c = 0; c < kPanel; ++c) acc[c] = std::fma(static_cast<float>(is[c]), xs * p.scales[g * kPanel + c], acc[c]);
    }
    store_row(acc, b, y + r * ldy, n_cols);
  }
}

}  // namespace scalar

// ------------------------------------------------------------------------------------------------ AVX-512
namespace avx512 {

// Loaders: begin(g) enters input group g, load(k) gives the 32 weights of input k as fp32 in two registers.
struct F32 {
  const float* w;
  int64_t group;
  const float* next = nullptr;
  bool has_next() const { return next != nullptr; }
  FROST_AVX512 void prefetch(int64_t k) const {
    _mm_prefetch(reinterpret_cast<const char*>(next + k * kPanel), _MM_HINT_T1);
    _mm_prefetch(reinterpret_cast<const char*>(next + k * kPanel + 16), _MM_HINT_T1);
  }
  FROST_AVX512 void begin(int64_t) {}
  FROST_AVX512 void load(int64_t k, __m512& w0, __m512& w1) const {
    w0 = _mm512_loadu_ps(w + k * kPanel);
    w1 = _mm512_loadu_ps(w + k * kPanel + 16);
  }
};
struct BF16 {
  const uint16_t* w;
  int64_t group;
  bool has_next() const { return false; }
  FROST_AVX512 void prefetch(int64_t) const {}
  FROST_AVX512 void begin(int64_t) {}
  FROST_AVX512 void load(int64_t k, __m512& w0, __m512& w1) const {
    const __m512i v = _mm512_loadu_si512(w + k * kPanel);
    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16));
    w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16));
  }
};
struct Q8 {
  const int8_t* w;
  const float* scales;
  int64_t group;
  const float* s = nullptr;
  bool has_next() const { return false; }
  FROST_AVX512 void prefetch(int64_t) const {}
  FROST_AVX512 void begin(int64_t g) { s = scales + g * kPanel; }
  FROST_AVX512 void load(int64_t k, __m512& w0, __m512& w1) const {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k * kPanel));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k * kPanel + 16));
    w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), _mm512_loadu_ps(s));
    w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), _mm512_loadu_ps(s + 16));
  }
};
struct Q4 {
  const uint8_t* w;
  const float* scales;
  const float* mins;
  int64_t group;
  const float* s = nullptr;
  const float* m = nullptr;
  bool has_next() const { return false; }
  FROST_AVX512 void prefetch(int64_t) const {}
  FROST_AVX512 void begin(int64_t g) {
    s = scales + g * kPanel;
    m = mins + g * kPanel;
  }
  FROST_AVX512 void load(int64_t k, __m512& w0, __m512& w1) const {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k * (kPanel / 2)));
    const __m128i nib = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, nib), hi = _mm_and_si128(_mm_srli_epi16(b, 4), nib);
    w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), _mm512_loadu_ps(s), _mm512_loadu_ps(m));
    w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), _mm512_loadu_ps(s + 16),
                         _mm512_loadu_ps(m + 16));
  }
};

// R rows × 32 columns: acc = fma(x[r, k], w(k, c), acc) for k in order. PF: pull the loader's next panel
// into L2 meanwhile (panel_rows says when).
template <int R, class L, bool PF = false>
FROST_AVX512 void tile(L l, const float* x, int64_t ldx, int64_t n_in, const float* b, float* y, int64_t ldy,
                       int64_t n_cols) {
  __m512 a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
  for (int64_t k0 = 0, g = 0; k0 < n_in; k0 += l.group, ++g) {
    l.begin(g);
    const int64_t k1 = std::min(n_in, k0 + l.group);
    for (int64_t k = k0; k < k1; ++k) {
      __m512 w0, w1;
      if constexpr (PF) l.prefetch(k);
      l.load(k, w0, w1);
      for (int r = 0; r < R; ++r) {
        const __m512 xb = _mm512_set1_ps(x[r * ldx + k]);
        a0[r] = _mm512_fmadd_ps(xb, w0, a0[r]);
        a1[r] = _mm512_fmadd_ps(xb, w1, a1[r]);
      }
    }
  }
  if (n_cols == kPanel) {
    const __m512 b0 = b ? _mm512_loadu_ps(b) : _mm512_setzero_ps();
    const __m512 b1 = b ? _mm512_loadu_ps(b + 16) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(y + r * ldy, b ? _mm512_add_ps(a0[r], b0) : a0[r]);
      _mm512_storeu_ps(y + r * ldy + 16, b ? _mm512_add_ps(a1[r], b1) : a1[r]);
    }
    return;
  }
  alignas(64) float tmp[kPanel];
  for (int r = 0; r < R; ++r) {
    _mm512_store_ps(tmp, a0[r]);
    _mm512_store_ps(tmp + 16, a1[r]);
    store_row(tmp, b, y + r * ldy, n_cols);
  }
}

// Tile heights: the largest that keeps the accumulators in registers (2·12 of 32 zmm), then smaller ones.
template <class L>
FROST_AVX512 void panel_rows(L l, const float* x, int64_t ldx, int64_t n_rows, int64_t n_in, const float* b,
                             float* y, int64_t ldy, int64_t n_cols) {
  // Batched rows (>= 20: two tiles or more, the second of 8 or 12 rows): the first tile streams this panel
  // from memory, the second runs from L2 and meanwhile pulls the thread's next panel into L2 (two lines per
  // input, beside 2·R FMAs), so that panel's first tile does not wait on DRAM. builtin:15m at 32 rows: the
  // step's GEMMs 5-9% faster (frost-bench bare-step, packed form, alternated). A decode row is
  // bandwidth-bound: nothing to hide. Only fp32 panels carry `next` (Panel::next).
  const bool pf = l.has_next() && n_rows >= 20;
  int64_t r = 0;
  for (; r + 12 <= n_rows; r += 12)
    (pf && r == 12 ? tile<12, L, true> : tile<12, L>)(l, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r + 8 <= n_rows; r += 8)
    (pf && r == 12 ? tile<8, L, true> : tile<8, L>)(l, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r + 4 <= n_rows; r += 4) tile<4>(l, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r + 2 <= n_rows; r += 2) tile<2>(l, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r < n_rows; ++r) tile<1>(l, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
}

template <class L>
FROST_AVX512 void dequant_panel(L l, int64_t n_in, float* out) {
  for (int64_t k0 = 0, g = 0; k0 < n_in; k0 += l.group, ++g) {
    l.begin(g);
    for (int64_t k = k0; k < std::min(n_in, k0 + l.group); ++k) {
      __m512 w0, w1;
      l.load(k, w0, w1);
      _mm512_storeu_ps(out + k * kPanel, w0);
      _mm512_storeu_ps(out + k * kPanel + 16, w1);
    }
  }
}

// W8A8 with VPDPBUSD: per 4 inputs, the 32 outputs' unsigned weight bytes (two registers) against the row's
// four signed activation bytes broadcast; 128·Σq comes off per group, then the fp32 epilogue.
template <int R>
FROST_AVX512_VNNI void tile_a8(const Panel& p, const ActA8& a, int64_t n_in4, const float* b, float* y, int64_t ldy,
                               int64_t n_cols) {
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
  __m512 f0[R], f1[R];
  for (int r = 0; r < R; ++r) f0[r] = f1[r] = _mm512_setzero_ps();
  for (int64_t k0 = 0, g = 0; k0 < n_in4; k0 += p.group, ++g) {
    __m512i i0[R], i1[R];
    for (int r = 0; r < R; ++r) i0[r] = i1[r] = _mm512_setzero_si512();
    const int64_t k1 = std::min(n_in4, k0 + p.group);
    for (int64_t k = k0; k < k1; k += 4) {
      const __m512i w0 = _mm512_loadu_si512(w + k * kPanel), w1 = _mm512_loadu_si512(w + k * kPanel + 64);
      for (int r = 0; r < R; ++r) {
        int32_t xv;
        std::memcpy(&xv, a.q + r * a.ldq + k, sizeof(xv));
        const __m512i xb = _mm512_set1_epi32(xv);
        i0[r] = _mm512_dpbusd_epi32(i0[r], w0, xb);
        i1[r] = _mm512_dpbusd_epi32(i1[r], w1, xb);
      }
    }
    const __m512 s0 = _mm512_loadu_ps(p.scales + g * kPanel), s1 = _mm512_loadu_ps(p.scales + g * kPanel + 16);
    for (int r = 0; r < R; ++r) {
      const __m512i corr = _mm512_set1_epi32(a.qsum128[r * a.lds + g]);
      const __m512 xs = _mm512_set1_ps(a.xs[r * a.lds + g]);
      f0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(i0[r], corr)), _mm512_mul_ps(xs, s0), f0[r]);
      f1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(i1[r], corr)), _mm512_mul_ps(xs, s1), f1[r]);
    }
  }
  alignas(64) float tmp[kPanel];
  for (int r = 0; r < R; ++r) {
    _mm512_store_ps(tmp, f0[r]);
    _mm512_store_ps(tmp + 16, f1[r]);
    store_row(tmp, b, y + r * ldy, n_cols);
  }
}

// 6 rows: 4 accumulators each (24 zmm) + 2 weights + the broadcast.
FROST_AVX512_VNNI void panel_rows_a8(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4, const float* b,
                                     float* y, int64_t ldy, int64_t n_cols) {
  int64_t r = 0;
  for (; r + 6 <= n_rows; r += 6) tile_a8<6>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
  for (; r + 4 <= n_rows; r += 4) tile_a8<4>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
  for (; r + 2 <= n_rows; r += 2) tile_a8<2>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
  for (; r < n_rows; ++r) tile_a8<1>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
}

}  // namespace avx512

// ------------------------------------------------------------------------------------------------ AVX2
namespace avx2 {

// As avx512, with the 32 weights of input k in four 8-lane registers.
struct F32 {
  const float* w;
  int64_t group;
  FROST_AVX2 void begin(int64_t) {}
  FROST_AVX2 void load(int64_t k, __m256 v[4]) const {
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(w + k * kPanel + 8 * i);
  }
};
struct BF16 {
  const uint16_t* w;
  int64_t group;
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
FROST_AVX2 void panel_rows(L l, const float* x, int64_t ldx, int64_t n_rows, int64_t n_in, const float* b, float* y,
                           int64_t ldy, int64_t n_cols) {
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

// W8A8 without VNNI (AVX2 machines, and AVX-512 ones without VNNI): the weight bytes back to signed (xor 0x80),
// then VPMADDUBSW on |x| and w with x's sign (|x|, |w| <= 127: a pair sums to at most 32,258, so the int16
// never saturates) and VPMADDWD by 1: the same exact Σ q·w per group as VPDPBUSD minus its correction.
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
        wv[t] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k * kPanel + 32 * t)), flip);
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

FROST_AVX2 void panel_rows_a8(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4, const float* b,
                              float* y, int64_t ldy, int64_t n_cols) {
  int64_t r = 0;
  for (; r + 2 <= n_rows; r += 2) tile_a8<2>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
  for (; r < n_rows; ++r) tile_a8<1>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
}

}  // namespace avx2

// ------------------------------------------------------------------------------------------------ driver

// Panel p of w as a loader view.
Panel panel_of(const PackedMatrix& w, int64_t p) {
  Panel v;
  const int64_t n_groups = w.scales.defined() ? w.scales.size(1) : 0;
  switch (w.format) {
    case PackFormat::kF32:
      v.w = w.panels.data_ptr<float>() + p * w.n_in * kPanel;
      break;
    case PackFormat::kBF16:
      v.w = static_cast<const uint16_t*>(w.panels.data_ptr()) + p * w.n_in * kPanel;
      break;
    case PackFormat::kQ8:
      v.w = w.panels.data_ptr<int8_t>() + p * w.n_in * kPanel;
      break;
    case PackFormat::kQ8A8:
      v.w = w.panels.data_ptr<uint8_t>() + p * round_up4(w.n_in) * kPanel;
      break;
    case PackFormat::kQ4:
      v.w = w.panels.data_ptr<uint8_t>() + p * w.n_in * (kPanel / 2);
      break;
  }
  if (w.scales.defined()) v.scales = w.scales.data_ptr<float>() + p * n_groups * kPanel;
  if (w.mins.defined()) v.mins = w.mins.data_ptr<float>() + p * n_groups * kPanel;
  v.group = w.group > 0 ? w.group : w.n_in;
  if (w.format == PackFormat::kQ8A8 && v.group >= w.n_in) v.group = round_up4(w.n_in);  // one group
  return v;
}

// The dequantized panel buffer of a task (n_in × 32 floats, reused across calls on this thread).
float* panel_buffer(int64_t n_in) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n_in * kPanel) buf.resize(static_cast<size_t>(n_in * kPanel));
  return buf.data();
}

// One panel of one row block, on ISA `I` (a namespace's functions wrapped in a struct).
struct ScalarIsa {
  static void run(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr, const float* b,
                  float* y, int64_t ldy, int64_t nc) {
    switch (w.format) {
      case PackFormat::kF32:
        return scalar::panel_rows<scalar::F32>(p, x, ldx, nr, w.n_in, b, y, ldy, nc);
      case PackFormat::kBF16:
        return scalar::panel_rows<scalar::BF16>(p, x, ldx, nr, w.n_in, b, y, ldy, nc);
      case PackFormat::kQ8A8:
        TORCH_CHECK(false, "gemm_packed: W8A8 panels run through gemm_a8");
      case PackFormat::kQ8:
      case PackFormat::kQ4: {
        if (nr <= kDirectRows) {
          if (w.format == PackFormat::kQ8) return scalar::panel_rows<scalar::Q8>(p, x, ldx, nr, w.n_in, b, y, ldy, nc);
          return scalar::panel_rows<scalar::Q4>(p, x, ldx, nr, w.n_in, b, y, ldy, nc);
        }
        float* buf = panel_buffer(w.n_in);
        if (w.format == PackFormat::kQ8) scalar::dequant_panel<scalar::Q8>(p, w.n_in, buf);
        else scalar::dequant_panel<scalar::Q4>(p, w.n_in, buf);
        Panel f{buf, nullptr, nullptr, w.n_in};
        return scalar::panel_rows<scalar::F32>(f, x, ldx, nr, w.n_in, b, y, ldy, nc);
      }
    }
  }
};

struct Avx512Isa {
  static void run(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr, const float* b,
                  float* y, int64_t ldy, int64_t nc) {
    using namespace avx512;
    const int64_t n_in = w.n_in;
    switch (w.format) {
      case PackFormat::kF32:
        return panel_rows(F32{static_cast<const float*>(p.w), p.group, static_cast<const float*>(p.next)}, x, ldx,
                          nr, n_in, b, y, ldy, nc);
      case PackFormat::kBF16:
        return panel_rows(BF16{static_cast<const uint16_t*>(p.w), p.group}, x, ldx, nr, n_in, b, y, ldy, nc);
      case PackFormat::kQ8A8:
        TORCH_CHECK(false, "gemm_packed: W8A8 panels run through gemm_a8");
      case PackFormat::kQ8:
      case PackFormat::kQ4: {
        const Q8 q8{static_cast<const int8_t*>(p.w), p.scales, p.group};
        const Q4 q4{static_cast<const uint8_t*>(p.w), p.scales, p.mins, p.group};
        if (nr <= kDirectRows) {
          if (w.format == PackFormat::kQ8) return panel_rows(q8, x, ldx, nr, n_in, b, y, ldy, nc);
          return panel_rows(q4, x, ldx, nr, n_in, b, y, ldy, nc);
        }
        float* buf = panel_buffer(n_in);
        if (w.format == PackFormat::kQ8) dequant_panel(q8, n_in, buf);
        else dequant_panel(q4, n_in, buf);
        return panel_rows(F32{buf, n_in}, x, ldx, nr, n_in, b, y, ldy, nc);
      }
    }
  }
};

struct Avx2Isa {
  static void run(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr, const float* b,
                  float* y, int64_t ldy, int64_t nc) {
    using namespace avx2;
    const int64_t n_in = w.n_in;
    switch (w.format) {
      case PackFormat::kF32:
        return panel_rows(F32{static_cast<const float*>(p.w), p.group}, x, ldx, nr, n_in, b, y, ldy, nc);
      case PackFormat::kBF16:
        return panel_rows(BF16{static_cast<const uint16_t*>(p.w), p.group}, x, ldx, nr, n_in, b, y, ldy, nc);
      case PackFormat::kQ8A8:
        TORCH_CHECK(false, "gemm_packed: W8A8 panels run through gemm_a8");
      case PackFormat::kQ8:
      case PackFormat::kQ4: {
        const Q8 q8{static_cast<const int8_t*>(p.w), p.scales, p.group};
        const Q4 q4{static_cast<const uint8_t*>(p.w), p.scales, p.mins, p.group};
        if (nr <= kDirectRows) {
          if (w.format == PackFormat::kQ8) return panel_rows(q8, x, ldx, nr, n_in, b, y, ldy, nc);
          return panel_rows(q4, x, ldx, nr, n_in, b, y, ldy, nc);
        }
        float* buf = panel_buffer(n_in);
        if (w.format == PackFormat::kQ8) dequant_panel(q8, n_in, buf);
        else dequant_panel(q4, n_in, buf);
        return panel_rows(F32{buf, n_in}, x, ldx, nr, n_in, b, y, ldy, nc);
      }
    }
  }
};

// Runs panel(p, r0, nr, p_next) for every (row block, panel) of a product: tasks are (row block, group of
// panels), panel-minor so neighbouring tasks share their activation rows, claimed dynamically one ahead
// (kernels/cpu/parallel.h, parallel_tasks_ahead), so p_next is the panel this thread runs next (-1: none).
// A group is at least ~32K multiply-adds; products below ~64K run on the calling thread alone.
template <class Fn>
void for_panels(const PackedMatrix& w, int64_t n_rows, Fn&& panel) {
  const int64_t n_in = w.n_in, n_panels = w.panels.size(0);
  const int64_t n_blocks = (n_rows + kRowBlock - 1) / kRowBlock;
  const int64_t rows_per_block = std::min(n_rows, kRowBlock);
  const int64_t per_panel = rows_per_block * n_in * kPanel;
  const int64_t group = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, per_panel));
  const int64_t n_groups = (n_panels + group - 1) / group;
  auto task = [&](int64_t t, int64_t t_next) {
    const int64_t rb = t / n_groups, g = t % n_groups;
    const int64_t r0 = rb * kRowBlock, nr = std::min(kRowBlock, n_rows - r0);
    const int64_t p_end = std::min(n_panels, (g + 1) * group);
    const int64_t after = t_next < 0 ? -1 : (t_next % n_groups) * group;  // the next task's first panel
    for (int64_t p = g * group; p < p_end; ++p) panel(p, r0, nr, p + 1 < p_end ? p + 1 : after);
  };
  const int64_t n_tasks = n_blocks * n_groups;
  if (n_rows * n_in * w.n_out < (int64_t{1} << 16)) {
    for (int64_t t = 0; t < n_tasks; ++t) task(t, t + 1 < n_tasks ? t + 1 : -1);
  } else {
    parallel_tasks_ahead(n_tasks, task);
  }
}

template <class I>
void gemm(const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y, int64_t ldy) {
  for_panels(w, n_rows, [&](int64_t p, int64_t r0, int64_t nr, int64_t p_next) {
    const int64_t c0 = p * kPanel, nc = std::min(kPanel, w.n_out - c0);
    Panel pan = panel_of(w, p);
    if (p_next >= 0 && w.format == PackFormat::kF32) pan.next = panel_of(w, p_next).w;
    I::run(w, pan, x + r0 * ldx, ldx, nr, b ? b + c0 : nullptr, y + r0 * ldy + c0, ldy, nc);
  });
}

// W8A8: the rows are quantized once (on the calling thread, into its reused buffers), then every panel task
// runs `panel_rows` (one ISA's panel_rows_a8) over them.
using PanelRowsA8 = void (*)(const Panel&, const ActA8&, int64_t n_rows, int64_t n_in4, const float* b, float* y,
                             int64_t ldy, int64_t n_cols);
void gemm_a8(PanelRowsA8 panel_rows, const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows,
             const float* b, float* y, int64_t ldy) {
  const int64_t n_in4 = round_up4(w.n_in), n_groups = w.scales.size(1);
  thread_local std::vector<int8_t> qbuf;
  thread_local std::vector<float> sbuf;
  thread_local std::vector<int32_t> cbuf;
  if (static_cast<int64_t>(qbuf.size()) < n_rows * n_in4) qbuf.resize(static_cast<size_t>(n_rows * n_in4));
  if (static_cast<int64_t>(sbuf.size()) < n_rows * n_groups) {
    sbuf.resize(static_cast<size_t>(n_rows * n_groups));
    cbuf.resize(static_cast<size_t>(n_rows * n_groups));
  }
  quantize_activations_a8(x, ldx, n_rows, w.n_in, w.group, qbuf.data(), n_in4, sbuf.data(), n_groups);
  const int64_t G = panel_of(w, 0).group;
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t g = 0; g < n_groups; ++g) {
      int32_t sum = 0;
      for (int64_t k = g * G; k < std::min(n_in4, (g + 1) * G); ++k) sum += qbuf[static_cast<size_t>(r * n_in4 + k)];
      cbuf[static_cast<size_t>(r * n_groups + g)] = 128 * sum;
    }
  const ActA8 act{qbuf.data(), n_in4, sbuf.data(), cbuf.data(), n_groups};
  for_panels(w, n_rows, [&](int64_t p, int64_t r0, int64_t nr, int64_t) {
    const int64_t c0 = p * kPanel, nc = std::min(kPanel, w.n_out - c0);
    panel_rows(panel_of(w, p), act.at_row(r0), nr, n_in4, b ? b + c0 : nullptr, y + r0 * ldy + c0, ldy, nc);
  });
}

// [P·32, n_in] rows zero-padded to whole panels, then each panel transposed to [n_in, 32].
at::Tensor panelize(const at::Tensor& m, int64_t n_panels) {
  at::Tensor padded = at::zeros({n_panels * kPanel, m.size(1)}, m.options());
  padded.narrow(0, 0, m.size(0)).copy_(m);
  return padded.view({n_panels, kPanel, m.size(1)}).transpose(1, 2).contiguous();
}

// The packed tensors move into huge-page-advised memory (kernels/cpu/huge_pages.h): every decode step streams
// them whole, and on 4 KiB pages that stream pays a TLB miss per page.
PackedMatrix in_huge_pages(PackedMatrix m) {
  for (at::Tensor* t : {&m.panels, &m.scales, &m.mins})
    if (t->defined()) *t = huge_page_copy(*t);
  return m;
}

}  // namespace

const char* pack_format_name(PackFormat f) {
  switch (f) {
    case PackFormat::kBF16:
      return "bf16";
    case PackFormat::kQ8:
      return "int8";
    case PackFormat::kQ4:
      return "int4";
    case PackFormat::kQ8A8:
      return "w8a8";
    default:
      return "fp32";
  }
}

int64_t PackedMatrix::bytes() const {
  int64_t n = 0;
  for (const at::Tensor* t : {&panels, &scales, &mins})
    if (t->defined()) n += t->numel() * static_cast<int64_t>(t->element_size());
  return n;
}

PackedMatrix pack_matrix(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16),
              "pack_matrix: need a contiguous fp32/bf16 [n_out, n_in] matrix, got ", w.sizes(), " ", w.scalar_type());
  PackedMatrix m;
  m.format = w.scalar_type() == at::kFloat ? PackFormat::kF32 : PackFormat::kBF16;
  m.n_out = w.size(0);
  m.n_in = w.size(1);
  m.group = m.n_in;
  m.panels = panelize(w, (m.n_out + kPanel - 1) / kPanel);
  return in_huge_pages(std::move(m));
}

PackedMatrix pack_quantized(const QuantizedMatrix& qm) {
  TORCH_CHECK(qm.defined() && (qm.bits == 8 || qm.bits == 4) && qm.group > 0, "pack_quantized: not a quantized matrix");
  PackedMatrix m;
  m.format = qm.bits == 8 ? PackFormat::kQ8 : PackFormat::kQ4;
  m.n_out = qm.n_out;
  m.n_in = qm.n_in;
  m.group = qm.group;
  const int64_t n_panels = (m.n_out + kPanel - 1) / kPanel;
  // Padding rows: q = 0 with scale 0 (and minimum 0) dequantize to 0.
  m.scales = panelize(qm.scales, n_panels);  // [P, n_groups, 32]
  if (qm.bits == 4) m.mins = panelize(qm.mins, n_panels);
  const at::Tensor q = panelize(qm.q, n_panels);  // [P, n_in, 32]
  if (qm.bits == 8) {
    m.panels = q;
  } else {  // byte j of an input row: output j | output j+16 << 4
    const at::Tensor lo = q.narrow(2, 0, 16), hi = q.narrow(2, 16, 16);
    m.panels = at::bitwise_or(lo, at::bitwise_left_shift(hi, 4)).contiguous();
  }
  return in_huge_pages(std::move(m));
}

void gemm_packed_isa(Isa isa, const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows, const float* b,
                     float* y, int64_t ldy) {
  TORCH_CHECK(w.defined() && ldx >= w.n_in && ldy >= w.n_out && n_rows >= 0, "gemm_packed: bad shapes");
  TORCH_CHECK(isa_supported(isa), "gemm_packed: this CPU cannot run the ", isa_name(isa), " kernels");
  if (n_rows == 0) return;
  if (w.format == PackFormat::kQ8A8) {  // VPDPBUSD needs VNNI: an AVX-512 CPU without it runs the AVX2 kernel
    const PanelRowsA8 rows = isa == Isa::kAvx512 && cpu_features().avx512_vnni ? avx512::panel_rows_a8
                             : isa != Isa::kScalar                            ? avx2::panel_rows_a8
                                                                              : scalar::panel_rows_a8;
    return gemm_a8(rows, w, x, ldx, n_rows, b, y, ldy);
  }
  switch (isa) {
    case Isa::kAvx512:
      return gemm<Avx512Isa>(w, x, ldx, n_rows, b, y, ldy);
    case Isa::kAvx2:
      return gemm<Avx2Isa>(w, x, ldx, n_rows, b, y, ldy);
    default:
      return gemm<ScalarIsa>(w, x, ldx, n_rows, b, y, ldy);
  }
}

PackedMatrix pack_quantized_a8(const QuantizedMatrix& qm) {
  TORCH_CHECK(qm.defined() && qm.bits == 8 && qm.group > 0 && (qm.group % 4 == 0 || qm.group >= qm.n_in),
              "pack_quantized_a8: need an int8 matrix whose group is a multiple of 4 or the whole row, got bits ",
              qm.bits, " group ", qm.group, " n_in ", qm.n_in);
  PackedMatrix m;
  m.format = PackFormat::kQ8A8;
  m.n_out = qm.n_out;
  m.n_in = qm.n_in;
  m.group = qm.group;
  const int64_t n_panels = (m.n_out + kPanel - 1) / kPanel, n_in4 = round_up4(m.n_in);
  m.scales = panelize(qm.scales, n_panels);  // [P, n_groups, 32]; padding rows have scale 0
  at::Tensor u = at::full({n_panels * kPanel, n_in4}, 128, at::kInt);  // q + 128; padding is q = 0
  u.narrow(0, 0, m.n_out).narrow(1, 0, m.n_in).add_(qm.q.to(at::kInt));
  m.panels = u.to(at::kByte).view({n_panels, kPanel, n_in4 / 4, 4}).permute({0, 2, 1, 3}).contiguous();
  return in_huge_pages(std::move(m));
}

void quantize_activations_a8(const float* x, int64_t ldx, int64_t n_rows, int64_t n_in, int64_t group, int8_t* q,
                             int64_t ldq, float* scales, int64_t lds) {
  const int64_t G = group <= 0 || group >= n_in ? n_in : group, n_in4 = round_up4(n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * ldx;
    int8_t* qr = q + r * ldq;
    for (int64_t k0 = 0, g = 0; k0 < n_in; k0 += G, ++g) {
      const int64_t k1 = std::min(n_in, k0 + G);
      float amax = 0.f;
      bool finite = true;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = std::fabs(xr[k]);
        finite = finite && v <= std::numeric_limits<float>::max();
        amax = std::max(amax, v);
      }
      if (!finite || amax == 0.f) {
        // Zeros quantize to zeros; a non-finite input makes the group's scale NaN, so the outputs are NaN as
        // the fp32 product's would be, rather than a finite number made up of the rest.
        for (int64_t k = k0; k < k1; ++k) qr[k] = 0;
        scales[r * lds + g] = finite ? 0.f : std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      const float inv = 127.f / amax;
      for (int64_t k = k0; k < k1; ++k)
        qr[k] = static_cast<int8_t>(std::clamp(std::nearbyint(xr[k] * inv), -127.f, 127.f));
      scales[r * lds + g] = amax / 127.f;
    }
    std::fill(qr + n_in, qr + n_in4, int8_t{0});
  }
}

void gemm_q8a8_ref(const QuantizedMatrix& qm, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                   int64_t ldy) {
  TORCH_CHECK(qm.defined() && qm.bits == 8, "gemm_q8a8_ref: need an int8 matrix");
  const int64_t n_in = qm.n_in, n_out = qm.n_out, ng = qm.n_groups(), G = std::min(qm.group, n_in);
  const at::Tensor wq = qm.q.contiguous(), sc = qm.scales.contiguous();
  const int8_t* w = wq.data_ptr<int8_t>();
  const float* s = sc.data_ptr<float>();
  std::vector<int8_t> q(static_cast<size_t>(round_up4(n_in)));
  std::vector<float> xs(static_cast<size_t>(ng));
  for (int64_t r = 0; r < n_rows; ++r) {
    quantize_activations_a8(x + r * ldx, ldx, 1, n_in, qm.group, q.data(), round_up4(n_in), xs.data(), ng);
    for (int64_t o = 0; o < n_out; ++o) {
      float acc = 0.f;
      for (int64_t g = 0; g < ng; ++g) {
        int32_t is = 0;
        for (int64_t k = g * G; k < std::min(n_in, (g + 1) * G); ++k)
          is += static_cast<int32_t>(q[static_cast<size_t>(k)]) * w[o * n_in + k];
        acc = std::fma(static_cast<float>(is), xs[static_cast<size_t>(g)] * s[o * ng + g], acc);
      }
      y[r * ldy + o] = b ? acc + b[o] : acc;
    }
  }
}

void gemm_packed(const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                 int64_t ldy) {
  gemm_packed_isa(active_isa(), w, x, ldx, n_rows, b, y, ldy);
}

void gemm_packed_ref(const at::Tensor& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                     int64_t ldy) {
  const at::Tensor wc = w.contiguous();
  const int64_t n_out = wc.size(0), n_in = wc.size(1);
  const bool bf16 = wc.scalar_type() == at::kBFloat16;
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t o = 0; o < n_out; ++o) {
      float acc = 0.f;
      for (int64_t k = 0; k < n_in; ++k) {
        const float wv = bf16 ? bf16_to_f32(static_cast<const uint16_t*>(wc.data_ptr())[o * n_in + k])
                              : wc.data_ptr<float>()[o * n_in + k];
        acc = std::fma(x[r * ldx + k], wv, acc);
      }
      y[r * ldy + o] = b ? acc + b[o] : acc;
    }
}

}  // namespace frost::kernels
