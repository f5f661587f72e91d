#include "kernels/cpu/quant.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

namespace frost::kernels {
namespace {

at::Tensor as_f32(const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16),
              "quantize: need an fp32/bf16 [n_out, n_in] matrix, got ", w.sizes(), " ", w.scalar_type());
  return w.to(at::kFloat).contiguous();
}

}  // namespace

int64_t QuantizedMatrix::format_bytes() const {
  const int64_t n_q = bits == 4 ? (n_out * n_in + 1) / 2 : n_out * n_in;
  return n_q + n_out * n_groups() * 4 * (mins.defined() ? 2 : 1);
}

QuantizedMatrix quantize_int8(const at::Tensor& w_in, int64_t group) {
  const at::Tensor w = as_f32(w_in);
  QuantizedMatrix qm;
  qm.bits = 8;
  qm.n_out = w.size(0);
  qm.n_in = w.size(1);
  TORCH_CHECK(group >= 0, "quantize_int8: group must be >= 0, got ", group);
  qm.group = group == 0 ? std::max<int64_t>(1, qm.n_in) : group;
  const int64_t G = qm.n_groups();
  qm.q = at::empty({qm.n_out, qm.n_in}, at::kChar);
  qm.scales = at::empty({qm.n_out, G}, at::kFloat);
  const float* src = w.data_ptr<float>();
  auto* q = qm.q.data_ptr<int8_t>();
  float* s = qm.scales.data_ptr<float>();
  for (int64_t o = 0; o < qm.n_out; ++o)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * qm.group, k1 = std::min(qm.n_in, k0 + qm.group);
      float amax = 0;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(src[o * qm.n_in + k]));
      const float scale = amax / 127.f;
      s[o * G + g] = scale;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = scale > 0 ? std::round(src[o * qm.n_in + k] / scale) : 0.f;
        q[o * qm.n_in + k] = static_cast<int8_t>(std::clamp(v, -127.f, 127.f));
      }
    }
  return qm;
}

namespace {

// The int4 (scale, minimum) of one group: start from the min / max range, then alternate rounding to the
// 16 levels and the least-squares fit of (s, m) to those levels (w ≈ s·q + m), from the full range and from
// a few narrower ones (clipping outliers can lower the error of the rest); keep the smallest squared error.
void fit_int4(const float* w, int64_t n, float* scale, float* min) {
  float lo = w[0], hi = w[0];
  for (int64_t i = 1; i < n; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  auto error = [&](float s, float m) {
    double e = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float q = s > 0 ? std::clamp(std::round((w[i] - m) / s), 0.f, 15.f) : 0.f;
      const double d = static_cast<double>(std::fma(q, s, m)) - w[i];
      e += d * d;
    }
    return e;
  };
  float best_s = (hi - lo) / 15.f, best_m = lo;
  double best = error(best_s, best_m);
  if (!(hi > lo)) {
    *scale = best_s;
    *min = best_m;
    return;
  }
  for (float shrink : {1.0f, 0.95f, 0.9f, 0.85f, 0.8f}) {
    const float mid = 0.5f * (lo + hi), half = 0.5f * (hi - lo) * shrink;
    float s = 2 * half / 15.f, m = mid - half;
    for (int it = 0; it < 4 && s > 0; ++it) {
      // levels for (s, m), then the least-squares (s, m) for those levels
      double sq = 0, sqq = 0, sw = 0, sqw = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double q = std::clamp(std::round((w[i] - m) / s), 0.f, 15.f);
        sq += q;
        sqq += q * q;
        sw += w[i];
        sqw += q * w[i];
      }
      const double det = static_cast<double>(n) * sqq - sq * sq;
      if (det <= 0) break;
      const double ns = (static_cast<double>(n) * sqw - sq * sw) / det, nm = (sw - ns * sq) / static_cast<double>(n);
      if (!(ns > 0)) break;
      s = static_cast<float>(ns);
      m = static_cast<float>(nm);
      const double e = error(s, m);
      if (e < best) {
        best = e;
        best_s = s;
        best_m = m;
      }
    }
  }
  *scale = best_s;
  *min = best_m;
}

}  // namespace

QuantizedMatrix quantize_int4(const at::Tensor& w_in, int64_t group) {
  const at::Tensor w = as_f32(w_in);
  QuantizedMatrix qm;
  qm.bits = 4;
  qm.n_out = w.size(0);
  qm.n_in = w.size(1);
  TORCH_CHECK(group > 0, "quantize_int4: group must be > 0, got ", group);
  qm.group = group;
  const int64_t G = qm.n_groups();
  qm.q = at::empty({qm.n_out, qm.n_in}, at::kByte);
  qm.scales = at::empty({qm.n_out, G}, at::kFloat);
  qm.mins = at::empty({qm.n_out, G}, at::kFloat);
  const float* src = w.data_ptr<float>();
  auto* q = qm.q.data_ptr<uint8_t>();
  float* s = qm.scales.data_ptr<float>();
  float* m = qm.mins.data_ptr<float>();
  for (int64_t o = 0; o < qm.n_out; ++o)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * qm.group, k1 = std::min(qm.n_in, k0 + qm.group);
      const float* row = src + o * qm.n_in;
      float scale = 0, lo = 0;
      fit_int4(row + k0, k1 - k0, &scale, &lo);
      s[o * G + g] = scale;
      m[o * G + g] = lo;
      for (int64_t k = k0; k < k1; ++k) {
        const float v = scale > 0 ? std::round((row[k] - lo) / scale) : 0.f;
        q[o * qm.n_in + k] = static_cast<uint8_t>(std::clamp(v, 0.f, 15.f));
      }
    }
  return qm;
}

at::Tensor dequantize(const QuantizedMatrix& qm) {
  TORCH_CHECK(qm.defined() && (qm.bits == 8 || qm.bits == 4), "dequantize: not a quantized matrix");
  at::Tensor out = at::empty({qm.n_out, qm.n_in}, at::kFloat);
  float* dst = out.data_ptr<float>();
  const int64_t G = qm.n_groups();
  const float* s = qm.scales.data_ptr<float>();
  for (int64_t o = 0; o < qm.n_out; ++o)
    for (int64_t k = 0; k < qm.n_in; ++k) {
      const int64_t g = k / qm.group;
      if (qm.bits == 8) {
        dst[o * qm.n_in + k] = static_cast<float>(qm.q.data_ptr<int8_t>()[o * qm.n_in + k]) * s[o * G + g];
      } else {
        dst[o * qm.n_in + k] = std::fma(static_cast<float>(qm.q.data_ptr<uint8_t>()[o * qm.n_in + k]), s[o * G + g],
                                        qm.mins.data_ptr<float>()[o * G + g]);
      }
    }
  return out;
}

}  // namespace frost::kernels
