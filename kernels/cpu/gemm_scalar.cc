// The packed GEMM's scalar variant (any x86-64, and the reference the SIMD variants are held to bit for bit):
// its weight loaders, panel rows and the W8A8 panel rows. The driver is gemm.cc; the shared parts
// gemm_panel.h.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/gemm_panel.h"

namespace frost::kernels::gemm_detail {
namespace {
namespace scalar {

// The weight (o = column c of the panel, input k) as fp32, for each format.
struct F32 {
  Panel p;
  explicit F32(const Panel& panel) : p(panel) {}
  float get(int64_t k, int64_t c) const { return static_cast<const float*>(p.w)[k * kPanel + c]; }
};
struct BF16 {
  Panel p;
  explicit BF16(const Panel& panel) : p(panel) {}
  float get(int64_t k, int64_t c) const {
    return bf16_to_f32(static_cast<const uint16_t*>(p.w)[k * kPanel + c]);
  }
};
struct Q8 {
  Panel p;
  explicit Q8(const Panel& panel) : p(panel) {}
  float get(int64_t k, int64_t c) const {
    return static_cast<float>(static_cast<const int8_t*>(p.w)[k * kPanel + c]) *
           p.scales[(k / p.group) * kPanel + c];
  }
};
struct Q4 {
  Panel p;
  explicit Q4(const Panel& panel) : p(panel) {}
  float get(int64_t k, int64_t c) const {
    const uint8_t b = static_cast<const uint8_t*>(p.w)[k * (kPanel / 2) + (c & 15)];
    const int v = c < 16 ? (b & 0xF) : (b >> 4);
    const int64_t g = (k / p.group) * kPanel + c;
    return std::fma(static_cast<float>(v), p.scales[g], p.mins[g]);
  }
};
struct Loaders {
  using F32 = scalar::F32;
  using BF16 = scalar::BF16;
  using Q8 = scalar::Q8;
  using Q4 = scalar::Q4;
};

template <class L>
void panel_rows(const L& l, const float* x, int64_t ldx, int64_t n_rows, int64_t n_in, const float* b,
                float* y, int64_t ldy, int64_t n_cols) {
  float acc[kPanel];
  for (int64_t r = 0; r < n_rows; ++r) {
    std::fill(acc, acc + kPanel, 0.f);
    for (int64_t k = 0; k < n_in; ++k) {
      const float xv = x[r * ldx + k];
      for (int64_t c = 0; c < kPanel; ++c) acc[c] = std::fma(xv, l.get(k, c), acc[c]);
    }
    store_row(acc, b, y + r * ldy, n_cols);
  }
}

template <class L>
void dequant_panel(const L& l, int64_t n_in, float* out) {
  for (int64_t k = 0; k < n_in; ++k)
    for (int64_t c = 0; c < kPanel; ++c) out[k * kPanel + c] = l.get(k, c);
}

}  // namespace scalar
}  // namespace

void panel_scalar(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr,
                  const float* b, float* y, int64_t ldy, int64_t nc) {
  run_panel<scalar::Loaders>(w, p, x, ldx, nr, b, y, ldy, nc);
}

// W8A8, on the packed layout: exact int32 sums per group, then the fp32 epilogue of gemm.h.
void panel_rows_a8_scalar(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4, const float* b,
                          float* y, int64_t ldy, int64_t n_cols) {
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
      for (int64_t c = 0; c < kPanel; ++c)
        acc[c] = std::fma(static_cast<float>(is[c]), xs * p.scales[g * kPanel + c], acc[c]);
    }
    store_row(acc, b, y + r * ldy, n_cols);
  }
}

}  // namespace frost::kernels::gemm_detail
