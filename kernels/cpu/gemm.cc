#include "kernels/cpu/gemm.h"

#include "kernels/cpu/parallel.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// GCC 12 reports false -Wmaybe-uninitialized inside its own avx512fintrin.h helpers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace frost::kernels {
namespace {

constexpr int64_t kPanel = 32;     // output columns per panel
constexpr int64_t kRowBlock = 96;  // activation rows per task (a multiple of every tile height)

inline float bf16_to_f32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Stores n valid columns (≤ 32) of a tile row: y[c] = acc[c] + b[c].
inline void store_row(const float* acc, const float* b, float* y, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] = b ? acc[c] + b[c] : acc[c];
}

#if defined(__AVX512F__)
struct F32Panel {
  using T = float;
  static void load(const float* p, __m512& w0, __m512& w1) {
    w0 = _mm512_loadu_ps(p);
    w1 = _mm512_loadu_ps(p + 16);
  }
};
struct Bf16Panel {
  using T = uint16_t;
  static void load(const uint16_t* p, __m512& w0, __m512& w1) {
    const __m512i v = _mm512_loadu_si512(p);
    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(v)), 16));
    w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(v, 1)), 16));
  }
};

// R rows × 32 columns: acc = fma(x[r, k], W[k, c], acc) for k in order.
template <int R, class L>
void tile(const typename L::T* panel, const float* x, int64_t ldx, int64_t n_in, const float* b, float* y,
          int64_t ldy, int64_t n_cols) {
  __m512 a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < n_in; ++k) {
    __m512 w0, w1;
    L::load(panel + k * kPanel, w0, w1);
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx + k]);
      a0[r] = _mm512_fmadd_ps(xb, w0, a0[r]);
      a1[r] = _mm512_fmadd_ps(xb, w1, a1[r]);
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
#elif defined(__AVX2__)
struct F32Panel {
  using T = float;
  static void load(const float* p, __m256 w[4]) {
    for (int i = 0; i < 4; ++i) w[i] = _mm256_loadu_ps(p + 8 * i);
  }
};
struct Bf16Panel {
  using T = uint16_t;
  static void load(const uint16_t* p, __m256 w[4]) {
    for (int i = 0; i < 4; ++i) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * i));
      w[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
};

template <int R, class L>
void tile(const typename L::T* panel, const float* x, int64_t ldx, int64_t n_in, const float* b, float* y,
          int64_t ldy, int64_t n_cols) {
  __m256 a[R][4];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < n_in; ++k) {
    __m256 w[4];
    L::load(panel + k * kPanel, w);
    for (int r = 0; r < R; ++r) {
      const __m256 xb = _mm256_set1_ps(x[r * ldx + k]);
      for (int i = 0; i < 4; ++i) a[r][i] = _mm256_fmadd_ps(xb, w[i], a[r][i]);
    }
  }
  alignas(32) float tmp[kPanel];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < 4; ++i) _mm256_store_ps(tmp + 8 * i, a[r][i]);
    store_row(tmp, b, y + r * ldy, n_cols);
  }
}
#else
struct F32Panel {
  using T = float;
  static float get(const float* p) { return *p; }
};
struct Bf16Panel {
  using T = uint16_t;
  static float get(const uint16_t* p) { return bf16_to_f32(*p); }
};

template <int R, class L>
void tile(const typename L::T* panel, const float* x, int64_t ldx, int64_t n_in, const float* b, float* y,
          int64_t ldy, int64_t n_cols) {
  float acc[kPanel];
  for (int r = 0; r < R; ++r) {
    std::fill(acc, acc + kPanel, 0.f);
    for (int64_t k = 0; k < n_in; ++k) {
      const float xv = x[r * ldx + k];
      for (int64_t c = 0; c < kPanel; ++c) acc[c] = std::fma(xv, L::get(panel + k * kPanel + c), acc[c]);
    }
    store_row(acc, b, y + r * ldy, n_cols);
  }
}
#endif

// Tile heights: the largest that keeps the accumulators in registers (AVX-512: 2·12 of 32 zmm; AVX2: 4·2
// of 16 ymm), then smaller ones for the leftover rows.
#if defined(__AVX512F__)
constexpr int kTall = 12, kMid = 8, kShort = 4;
#else
constexpr int kTall = 2, kMid = 2, kShort = 2;
#endif

template <class L>
void panel_rows(const typename L::T* panel, const float* x, int64_t ldx, int64_t n_rows, int64_t n_in,
                const float* b, float* y, int64_t ldy, int64_t n_cols) {
  int64_t r = 0;
  for (; r + kTall <= n_rows; r += kTall) tile<kTall, L>(panel, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r + kMid <= n_rows; r += kMid) tile<kMid, L>(panel, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r + kShort <= n_rows; r += kShort)
    tile<kShort, L>(panel, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r + 2 <= n_rows; r += 2) tile<2, L>(panel, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
  for (; r < n_rows; ++r) tile<1, L>(panel, x + r * ldx, ldx, n_in, b, y + r * ldy, ldy, n_cols);
}

template <class L>
void gemm(const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y, int64_t ldy) {
  const auto* base = static_cast<const typename L::T*>(w.panels.data_ptr());
  const int64_t n_in = w.n_in, n_panels = w.panels.size(0);
  const int64_t n_blocks = (n_rows + kRowBlock - 1) / kRowBlock;
  // Tasks are (row block, group of panels), panel-minor so neighbouring tasks share their activation rows,
  // claimed dynamically (kernels/cpu/parallel.h). A group is at least ~32K multiply-adds; products below
  // ~64K run on the calling thread alone.
  const int64_t rows_per_block = std::min(n_rows, kRowBlock);
  const int64_t per_panel = rows_per_block * n_in * kPanel;
  const int64_t group = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, per_panel));
  const int64_t n_groups = (n_panels + group - 1) / group;
  auto task = [&](int64_t t) {
    const int64_t rb = t / n_groups, g = t % n_groups;
    const int64_t r0 = rb * kRowBlock, nr = std::min(kRowBlock, n_rows - r0);
    for (int64_t p = g * group; p < std::min(n_panels, (g + 1) * group); ++p) {
      const int64_t c0 = p * kPanel, nc = std::min(kPanel, w.n_out - c0);
      panel_rows<L>(base + p * n_in * kPanel, x + r0 * ldx, ldx, nr, n_in, b ? b + c0 : nullptr, y + r0 * ldy + c0,
                    ldy, nc);
    }
  };
  if (n_rows * n_in * w.n_out < (int64_t{1} << 16)) {
    for (int64_t t = 0; t < n_blocks * n_groups; ++t) task(t);
  } else {
    parallel_tasks(n_blocks * n_groups, task);
  }
}

}  // namespace

PackedMatrix pack_matrix(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16),
              "pack_matrix: need a contiguous fp32/bf16 [n_out, n_in] matrix, got ", w.sizes(), " ", w.scalar_type());
  PackedMatrix m;
  m.n_out = w.size(0);
  m.n_in = w.size(1);
  const int64_t n_panels = (m.n_out + kPanel - 1) / kPanel;
  // [P·32, n_in] zero-padded, then each panel transposed to [n_in, 32].
  at::Tensor padded = at::zeros({n_panels * kPanel, m.n_in}, w.options());
  padded.narrow(0, 0, m.n_out).copy_(w);
  m.panels = padded.view({n_panels, kPanel, m.n_in}).transpose(1, 2).contiguous();
  return m;
}

void gemm_packed(const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows, const float* b, float* y,
                 int64_t ldy) {
  TORCH_CHECK(w.defined() && ldx >= w.n_in && ldy >= w.n_out && n_rows >= 0, "gemm_packed: bad shapes");
  if (n_rows == 0) return;
  if (w.dtype() == at::kFloat) return gemm<F32Panel>(w, x, ldx, n_rows, b, y, ldy);
  if (w.dtype() == at::kBFloat16) return gemm<Bf16Panel>(w, x, ldx, n_rows, b, y, ldy);
  TORCH_CHECK(false, "gemm_packed: unsupported weight dtype ", w.dtype());
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
