#pragma once
// The packed GEMM's internals shared by its translation units (not an API; include only from
// kernels/cpu/gemm*.cc): the panel view the kernels read, the per-ISA entry points, and the one per-panel
// dispatch every ISA instantiates.
//
// Files: gemm.cc drives a product (tasks over panels, packing, the W8A8 activation quantization, the scalar
// twins); gemm_scalar.cc, gemm_avx2.cc and gemm_avx512.cc each hold one ISA's loaders and tiles. Every one of
// them compiles at the x86-64 baseline (kernels/CMakeLists.txt); the SIMD functions carry per-function target
// attributes, so a binary built anywhere runs everywhere and picks its variant at run time
// (kernels/cpu/isa.h). What this header defines inline is baseline code, so nothing shared between the files
// can carry AVX-512 instructions into a baseline caller.
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm.h"

namespace frost::kernels::gemm_detail {

constexpr int64_t kPanel = 32;      // output columns per panel
constexpr int64_t kRowBlock = 96;   // activation rows per task (a multiple of every tile height)
constexpr int64_t kDirectRows = 4;  // quantized: up to this many rows dequantize in registers

// One panel as the loaders see it.
struct Panel {
  const void* w = nullptr;        // f32 / bf16 / int8: [n_in][32]; int4: [n_in][16] bytes
  const float* scales = nullptr;  // [n_groups][32]
  const float* mins = nullptr;    // [n_groups][32]
  int64_t group = 0;              // inputs per scale
  const void* next = nullptr;     // fp32: the panel this thread runs next (prefetched), or null
};

inline float bf16_to_f32(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// W8A8: the quantized activation rows a panel kernel reads (gemm.h): q [rows][ldq] int8, per row and group
// the scale xs and 128·Σq (what VPDPBUSD's unsigned weights add), [rows][lds].
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

// The dequantized panel buffer of a task (n_in × 32 floats, reused across calls on this thread; gemm.cc).
float* panel_buffer(int64_t n_in);

// One panel of one row block (every format but W8A8): y[r, c] for r < nr, c < nc, x and y already offset to
// the block and the panel's first column, b to its first column (or null). One per ISA.
using PanelFn = void (*)(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr,
                         const float* b, float* y, int64_t ldy, int64_t nc);
void panel_scalar(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr,
                  const float* b, float* y, int64_t ldy, int64_t nc);
void panel_avx2(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr,
                const float* b, float* y, int64_t ldy, int64_t nc);
void panel_avx512(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr,
                  const float* b, float* y, int64_t ldy, int64_t nc);

// W8A8: rows of one panel from the quantized activations (gemm.h's arithmetic). One per ISA; the AVX-512
// one needs VNNI.
using PanelRowsA8 = void (*)(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4, const float* b,
                             float* y, int64_t ldy, int64_t n_cols);
void panel_rows_a8_scalar(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4, const float* b,
                          float* y, int64_t ldy, int64_t n_cols);
void panel_rows_a8_avx2(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4, const float* b,
                        float* y, int64_t ldy, int64_t n_cols);
void panel_rows_a8_avx512_vnni(const Panel& p, const ActA8& a, int64_t n_rows, int64_t n_in4, const float* b,
                               float* y, int64_t ldy, int64_t n_cols);

// The per-panel dispatch, one definition for every ISA (each ISA's file instantiates it once, in its
// panel_<isa>). `Loaders` names the ISA's four weight loaders, each constructible from a Panel:
//   struct Loaders { using F32 = ...; using BF16 = ...; using Q8 = ...; using Q4 = ...; };
// and that ISA's namespace (the loaders' own) provides, found by argument-dependent lookup on the loader,
//   panel_rows(L, x, ldx, n_rows, n_in, b, y, ldy, n_cols)   the rows of one panel, the fma chain of gemm.h
//   dequant_panel(L, n_in, out)                              the panel as fp32 [n_in][32]
// Quantized panels with at most kDirectRows rows dequantize in registers; more rows dequantize the panel
// once into the thread's buffer and run the fp32 tiles over it (the same bits either way, gemm.h).
template <class Loaders>
void run_panel(const PackedMatrix& w, const Panel& p, const float* x, int64_t ldx, int64_t nr, const float* b,
               float* y, int64_t ldy, int64_t nc) {
  using F32 = typename Loaders::F32;
  using BF16 = typename Loaders::BF16;
  using Q8 = typename Loaders::Q8;
  using Q4 = typename Loaders::Q4;
  const int64_t n_in = w.n_in;
  switch (w.format) {
    case PackFormat::kF32:
      return panel_rows(F32(p), x, ldx, nr, n_in, b, y, ldy, nc);
    case PackFormat::kBF16:
      return panel_rows(BF16(p), x, ldx, nr, n_in, b, y, ldy, nc);
    case PackFormat::kQ8A8:
      TORCH_CHECK(false, "gemm_packed: W8A8 panels run through gemm_a8");
    case PackFormat::kQ8:
    case PackFormat::kQ4: {
      const bool q8 = w.format == PackFormat::kQ8;
      if (nr <= kDirectRows) {
        if (q8) return panel_rows(Q8(p), x, ldx, nr, n_in, b, y, ldy, nc);
        return panel_rows(Q4(p), x, ldx, nr, n_in, b, y, ldy, nc);
      }
      float* buf = panel_buffer(n_in);
      if (q8)
        dequant_panel(Q8(p), n_in, buf);
      else
        dequant_panel(Q4(p), n_in, buf);
      Panel f;
      f.w = buf;
      f.group = n_in;
      return panel_rows(F32(f), x, ldx, nr, n_in, b, y, ldy, nc);
    }
  }
}

}  // namespace frost::kernels::gemm_detail
