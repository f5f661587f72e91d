#include "kernels/cpu/gemm.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm_panel.h"
#include "kernels/cpu/huge_pages.h"
#include "kernels/cpu/parallel.h"

// The packed GEMM's driver: the tasks of a product over (row block, panel group), the per-call choice of an
// ISA's panel kernel (gemm_scalar.cc, gemm_avx2.cc, gemm_avx512.cc: one per-panel dispatch, run_panel in
// gemm_panel.h, instantiated once per ISA), packing, the W8A8 activation quantization and the scalar twins.

namespace frost::kernels {
using namespace gemm_detail;  // NOLINT(build/namespaces): this file is the gemm's own driver

namespace gemm_detail {

// The dequantized panel buffer of a task (n_in × 32 floats, reused across calls on this thread).
float* panel_buffer(int64_t n_in) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n_in * kPanel) buf.resize(static_cast<size_t>(n_in * kPanel));
  return buf.data();
}

}  // namespace gemm_detail

namespace {

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

// Every format but W8A8: every panel task runs `panel_fn` (one ISA's run_panel, gemm_panel.h).
void gemm(PanelFn panel_fn, const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows,
          const float* b, float* y, int64_t ldy) {
  for_panels(w, n_rows, [&](int64_t p, int64_t r0, int64_t nr, int64_t p_next) {
    const int64_t c0 = p * kPanel, nc = std::min(kPanel, w.n_out - c0);
    Panel pan = panel_of(w, p);
    if (p_next >= 0 && w.format == PackFormat::kF32) pan.next = panel_of(w, p_next).w;
    panel_fn(w, pan, x + r0 * ldx, ldx, nr, b ? b + c0 : nullptr, y + r0 * ldy + c0, ldy, nc);
  });
}

// W8A8: the rows are quantized once (on the calling thread, into its reused buffers), then every panel task
// runs `panel_rows` (one ISA's panel_rows_a8) over them.
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
      for (int64_t k = g * G; k < std::min(n_in4, (g + 1) * G); ++k)
        sum += qbuf[static_cast<size_t>(r * n_in4 + k)];
      cbuf[static_cast<size_t>(r * n_groups + g)] = 128 * sum;
    }
  const ActA8 act{qbuf.data(), n_in4, sbuf.data(), cbuf.data(), n_groups};
  for_panels(w, n_rows, [&](int64_t p, int64_t r0, int64_t nr, int64_t) {
    const int64_t c0 = p * kPanel, nc = std::min(kPanel, w.n_out - c0);
    panel_rows(panel_of(w, p), act.at_row(r0), nr, n_in4, b ? b + c0 : nullptr, y + r0 * ldy + c0, ldy, nc);
  });
}

// [P·32, n_in] rows zero-padded to whole panels, then each panel transposed to [n_in, 32].
// [n_out, n_in] → [n_panels, n_in, kPanel]: panel p, input k, lane j holds m[p·kPanel + j, k] (0 past n_out), in
// huge-page memory, written once, in parallel over panels (a 1B-class model packs ~5 GB: the ATen form below
// took four passes, one of them a strided transpose). panelize_reference is that form, its twin in the tests.
template <typename T>
void panelize_rows(const T* src, int64_t n_out, int64_t n_in, int64_t n_panels, T* dst) {
  at::parallel_for(0, n_panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* out = dst + p * n_in * kPanel;
      const int64_t rows = std::min<int64_t>(kPanel, n_out - p * kPanel);
      for (int64_t k0 = 0; k0 < n_in; k0 += 64) {  // a tile of 64 inputs × 32 lanes: both sides stay in L1
        const int64_t k1 = std::min(n_in, k0 + 64);
        for (int64_t j = 0; j < kPanel; ++j) {
          const T* row = src + (p * kPanel + j) * n_in;
          for (int64_t k = k0; k < k1; ++k) out[k * kPanel + j] = j < rows ? row[k] : T(0);
        }
      }
    }
  });
}

// `arena`: into the huge-page arena (what the GEMM streams), else ordinary memory (a temporary: the arena never
// reuses the space of a dead tensor inside a live slab).
at::Tensor panelize(const at::Tensor& m_in, int64_t n_panels, bool arena = true) {
  TORCH_CHECK(m_in.dim() == 2, "panelize: need a matrix");
  const at::Tensor m = m_in.contiguous();
  const int64_t n_out = m.size(0), n_in = m.size(1);
  at::Tensor out = arena ? huge_page_empty({n_panels, n_in, kPanel}, m.options())
                         : at::empty({n_panels, n_in, kPanel}, m.options());
  switch (m.element_size()) {
    case 4:
      panelize_rows(static_cast<const int32_t*>(m.data_ptr()), n_out, n_in, n_panels, static_cast<int32_t*>(out.data_ptr()));
      break;
    case 2:
      panelize_rows(static_cast<const int16_t*>(m.data_ptr()), n_out, n_in, n_panels, static_cast<int16_t*>(out.data_ptr()));
      break;
    case 1:
      panelize_rows(static_cast<const int8_t*>(m.data_ptr()), n_out, n_in, n_panels, static_cast<int8_t*>(out.data_ptr()));
      break;
    default:
      TORCH_CHECK(false, "panelize: unsupported element size ", m.element_size());
  }
  return out;
}

}  // namespace

at::Tensor panelize_reference(const at::Tensor& m, int64_t n_panels) {
  at::Tensor padded = at::zeros({n_panels * kPanel, m.size(1)}, m.options());
  padded.narrow(0, 0, m.size(0)).copy_(m);
  return padded.view({n_panels, kPanel, m.size(1)}).transpose(1, 2).contiguous();
}

at::Tensor panelize_for_test(const at::Tensor& m, int64_t n_panels) { return panelize(m, n_panels); }

namespace {

// The packed tensors live in huge-page-advised memory (kernels/cpu/huge_pages.h): every decode step streams them
// whole, and on 4 KiB pages that stream pays a TLB miss per page. panelize() writes there directly; a tensor
// made by another op afterwards (int4's nibble pairs, w8a8's byte quads) is copied there.

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
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous() &&
                  (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16),
              "pack_matrix: need a contiguous fp32/bf16 [n_out, n_in] matrix, got ", w.sizes(), " ",
              w.scalar_type());
  PackedMatrix m;
  m.format = w.scalar_type() == at::kFloat ? PackFormat::kF32 : PackFormat::kBF16;
  m.n_out = w.size(0);
  m.n_in = w.size(1);
  m.group = m.n_in;
  m.panels = panelize(w, (m.n_out + kPanel - 1) / kPanel);
  return m;
}

PackedMatrix pack_quantized(const QuantizedMatrix& qm) {
  TORCH_CHECK(qm.defined() && (qm.bits == 8 || qm.bits == 4) && qm.group > 0,
              "pack_quantized: not a quantized matrix");
  PackedMatrix m;
  m.format = qm.bits == 8 ? PackFormat::kQ8 : PackFormat::kQ4;
  m.n_out = qm.n_out;
  m.n_in = qm.n_in;
  m.group = qm.group;
  const int64_t n_panels = (m.n_out + kPanel - 1) / kPanel;
  // The panels go into the arena first, then their scales (the order the arena held them in before the one-pass
  // packer: w8a8 decode on builtin:15m ran ~7% slower with the scales first). Padding rows: q = 0 with scale 0
  // (and minimum 0) dequantize to 0.
  if (qm.bits == 8) {
    m.panels = panelize(qm.q, n_panels);  // [P, n_in, 32]
  } else {  // byte j of an input row: output j | output j+16 << 4
    const at::Tensor q = panelize(qm.q, n_panels, /*arena=*/false);
    const at::Tensor lo = q.narrow(2, 0, 16), hi = q.narrow(2, 16, 16);
    m.panels = huge_page_copy(at::bitwise_or(lo, at::bitwise_left_shift(hi, 4)));
  }
  m.scales = panelize(qm.scales, n_panels);  // [P, n_groups, 32]
  if (qm.bits == 4) m.mins = panelize(qm.mins, n_panels);
  return m;
}

void gemm_packed_isa(Isa isa, const PackedMatrix& w, const float* x, int64_t ldx, int64_t n_rows,
                     const float* b, float* y, int64_t ldy) {
  TORCH_CHECK(w.defined() && ldx >= w.n_in && ldy >= w.n_out && n_rows >= 0, "gemm_packed: bad shapes");
  TORCH_CHECK(isa_supported(isa), "gemm_packed: this CPU cannot run the ", isa_name(isa), " kernels");
  if (n_rows == 0) return;
  if (w.format == PackFormat::kQ8A8) {  // VPDPBUSD needs VNNI: an AVX-512 CPU without it runs the AVX2 kernel
    const PanelRowsA8 rows = isa == Isa::kAvx512 && cpu_features().avx512_vnni ? panel_rows_a8_avx512_vnni
                             : isa != Isa::kScalar                             ? panel_rows_a8_avx2
                                                                               : panel_rows_a8_scalar;
    return gemm_a8(rows, w, x, ldx, n_rows, b, y, ldy);
  }
  switch (isa) {
    case Isa::kAvx512:
      return gemm(panel_avx512, w, x, ldx, n_rows, b, y, ldy);
    case Isa::kAvx2:
      return gemm(panel_avx2, w, x, ldx, n_rows, b, y, ldy);
    default:
      return gemm(panel_scalar, w, x, ldx, n_rows, b, y, ldy);
  }
}

PackedMatrix pack_quantized_a8(const QuantizedMatrix& qm) {
  TORCH_CHECK(
      qm.defined() && qm.bits == 8 && qm.group > 0 && (qm.group % 4 == 0 || qm.group >= qm.n_in),
      "pack_quantized_a8: need an int8 matrix whose group is a multiple of 4 or the whole row, got bits ",
      qm.bits, " group ", qm.group, " n_in ", qm.n_in);
  PackedMatrix m;
  m.format = PackFormat::kQ8A8;
  m.n_out = qm.n_out;
  m.n_in = qm.n_in;
  m.group = qm.group;
  const int64_t n_panels = (m.n_out + kPanel - 1) / kPanel, n_in4 = round_up4(m.n_in);
  at::Tensor u = at::full({n_panels * kPanel, n_in4}, 128, at::kInt);  // q + 128; padding is q = 0
  u.narrow(0, 0, m.n_out).narrow(1, 0, m.n_in).add_(qm.q.to(at::kInt));
  m.panels = huge_page_copy(u.to(at::kByte).view({n_panels, kPanel, n_in4 / 4, 4}).permute({0, 2, 1, 3}));
  m.scales = panelize(qm.scales, n_panels);  // [P, n_groups, 32]; padding rows have scale 0 (after the panels)
  return m;
}

void quantize_activations_a8(const float* x, int64_t ldx, int64_t n_rows, int64_t n_in, int64_t group,
                             int8_t* q, int64_t ldq, float* scales, int64_t lds) {
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

void gemm_q8a8_ref(const QuantizedMatrix& qm, const float* x, int64_t ldx, int64_t n_rows, const float* b,
                   float* y, int64_t ldy) {
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

void gemm_packed_ref(const at::Tensor& w, const float* x, int64_t ldx, int64_t n_rows, const float* b,
                     float* y, int64_t ldy) {
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
