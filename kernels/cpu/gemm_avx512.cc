// The packed GEMM's AVX-512 variant: its weight loaders (32 weights of an input in two zmm), the register
// tiles of up to 12 rows with the next-panel prefetch, and the W8A8 tiles on VPDPBUSD (AVX512-VNNI). Every
// function here that uses AVX-512 carries its target attribute; the file compiles at the x86-64 baseline
// (gemm_panel.h says why). The driver is gemm.cc.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm_panel.h"

// GCC 12 reports false -Wmaybe-uninitialized inside its own avx512fintrin.h helpers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define FROST_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define FROST_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace frost::kernels::gemm_detail {
namespace {
namespace avx512 {

// Loaders: begin(g) enters input group g, load(k) gives the 32 weights of input k as fp32 in two registers.
struct F32 {
  const float* w;
  int64_t group;
  const float* next = nullptr;
  explicit F32(const Panel& p)
      : w(static_cast<const float*>(p.w)), group(p.group), next(static_cast<const float*>(p.next)) {}
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
  explicit BF16(const Panel& p) : w(static_cast<const uint16_t*>(p.w)), group(p.group) {}
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
  explicit Q8(const Panel& p) : w(static_cast<const int8_t*>(p.w)), scales(p.scales), group(p.group) {}
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
  explicit Q4(const Panel& p)
      : w(static_cast<const uint8_t*>(p.w)), scales(p.scales), mins(p.mins), group(p.group) {}
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
    w0 =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), _mm512_loadu_ps(s), _mm512_loadu_ps(m));
    w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), _mm512_loadu_ps(s + 16),
                         _mm512_loadu_ps(m + 16));
  }
};

struct Loaders {  // for run_panel (gemm_panel.h)
  using F32 = avx512::F32;
  using BF16 = avx512::BF16;
  using Q8 = avx512::Q8;
  using Q4 = avx512::Q4;
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
FROST_AVX512_VNNI void tile_a8(const Panel& p, const ActA8& a, int64_t n_in4, const float* b, float* y,
                               int64_t ldy, int64_t n_cols) {
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
    const __m512 s0 = _mm512_loadu_ps(p.scales + g * kPanel),
                 s1 = _mm512_loadu_ps(p.scales + g * kPanel + 16);
    for (int r = 0; r < R; ++r) {
      const __m512i corr = _mm512_set1_epi32(a.qsum128[r * a.lds + g]);
      const __m512 xs = _mm512_set1_ps(a.xs[r * a.lds + g]);
      f0[r] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(i0[r], corr)), _mm512_mul_ps(xs, s0), f0[r]);
      f1[r] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(i1[r], corr)), _mm512_mul_ps(xs, s1), f1[r]);
    }
  }
  alignas(64) float tmp[kPanel];
  for (int r = 0; r < R; ++r) {
    _mm512_store_ps(tmp, f0[r]);
    _mm512_store_ps(tmp + 16, f1[r]);
    store_row(tmp, b, y + r * ldy, n_cols);
  }
}

}  // namespace avx512
}  // namespace

void panel_avx512(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr,
                  const float* b, float* y, int64_t ldy, int64_t nc) {
  run_panel<avx512::Loaders>(w, p, x, ldx, nr, b, y, ldy, nc);
}

// 6 rows: 4 accumulators each (24 zmm) + 2 weights + the broadcast.
FROST_AVX512_VNNI void panel_rows_a8_avx512_vnni(const Panel& p, const ActA8& a, int64_t n_rows,
                                                 int64_t n_in4, const float* b, float* y, int64_t ldy,
                                                 int64_t n_cols) {
  int64_t r = 0;
  for (; r + 6 <= n_rows; r += 6) avx512::tile_a8<6>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
  for (; r + 4 <= n_rows; r += 4) avx512::tile_a8<4>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
  for (; r + 2 <= n_rows; r += 2) avx512::tile_a8<2>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
  for (; r < n_rows; ++r) avx512::tile_a8<1>(p, a.at_row(r), n_in4, b, y + r * ldy, ldy, n_cols);
}

}  // namespace frost::kernels::gemm_detail
