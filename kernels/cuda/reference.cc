// CPU twins of the CUDA kernels (kernels/cuda/reference.h). Compiled with -ffp-contract=off
// (kernels/cuda/CMakeLists.txt): the float products that must match the device bit for bit stay unfused.
#include "kernels/cuda/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "kernels/cpu/exp.h"
#include "kernels/cpu/kv_quant_row.h"

namespace frost::cuda::ref {

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

float bf16_round(float f) { return bf16_value(bf16_bits(f)); }

uint16_t f16_bits(float f) {
  // IEEE binary32 → binary16, round to nearest even (what __float2half_rn and F16C's vcvtps2ph do), written out
  // so that it builds with any compiler (_Float16 is not on every x86 compiler).
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN stays NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // ≥ 65520 (and inf) → inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half, a multiple of 2^-24 (the scaling is exact)
    float v;
    std::memcpy(&v, &a, 4);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f)));
  }
  const uint32_t v = a - 0x38000000u;  // rebias the exponent (127 → 15)
  return static_cast<uint16_t>(sign | ((v + 0xfffu + ((v >> 13) & 1u)) >> 13));
}

float f16_value(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t bits;
  if (e == 0) {  // zero or subnormal: m · 2^-24, exact in binary32
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

float f16_round(float f) { return f16_value(f16_bits(f)); }

float dtype_round(DType d, float f) {
  switch (d) {
    case DType::kF32: return f;
    case DType::kBF16: return bf16_round(f);
    case DType::kF16: return f16_round(f);
    case DType::kInt8: return f;
  }
  return f;
}

void rmsnorm(const float* x, const float* w, int rows, int dim, float eps, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int i = 0; i < dim; ++i)
      out[static_cast<int64_t>(r) * dim + i] = static_cast<float>(xr[i] * inv * w[i]);
  }
}

void layernorm(const float* x, const float* w, const float* b, int rows, int dim, float eps, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * dim;
    double m = 0, v = 0;
    for (int i = 0; i < dim; ++i) m += xr[i];
    m /= dim;
    for (int i = 0; i < dim; ++i) v += (xr[i] - m) * (xr[i] - m);
    const double inv = 1.0 / std::sqrt(v / dim + eps);
    for (int i = 0; i < dim; ++i)
      out[static_cast<int64_t>(r) * dim + i] = static_cast<float>((xr[i] - m) * inv * w[i] + b[i]);
  }
}

void rope_tables(int max_pos, int head_dim, double theta, std::vector<float>* cos_t,
                 std::vector<float>* sin_t) {
  const int half = head_dim / 2;
  cos_t->assign(static_cast<size_t>(max_pos) * half, 0.f);
  sin_t->assign(cos_t->size(), 0.f);
  for (int j = 0; j < half; ++j) {
    const float expo = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    const float inv_freq = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(expo)));
    for (int p = 0; p < max_pos; ++p) {
      const float a = static_cast<float>(p) * inv_freq;
      (*cos_t)[static_cast<size_t>(p) * half + j] = std::cos(a);
      (*sin_t)[static_cast<size_t>(p) * half + j] = std::sin(a);
    }
  }
}

void rope_row(float* x, int head_dim, const float* cos_t, const float* sin_t, int p) {
  const int half = head_dim / 2;
  for (int j = 0; j < half; ++j) {
    const float c = cos_t[static_cast<int64_t>(p) * half + j], s = sin_t[static_cast<int64_t>(p) * half + j];
    const float x1 = x[j], x2 = x[j + half];
    const float a = x1 * c, b = x2 * s, d = x2 * c, e = x1 * s;
    x[j] = a - b;
    x[j + half] = d + e;
  }
}

float encode_row(const float* x, int d, KvFormat f, uint8_t* dst) {
  switch (f) {
    case KvFormat::kF32:
      std::memcpy(dst, x, 4 * static_cast<size_t>(d));
      return 0.f;
    case KvFormat::kF16:
      for (int i = 0; i < d; ++i) {
        const uint16_t b = f16_bits(x[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return 0.f;
    case KvFormat::kBF16:
      for (int i = 0; i < d; ++i) {
        const uint16_t b = bf16_bits(x[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return 0.f;
    case KvFormat::kInt8:
      return kernels::kv_quantize_row(x, d, 8, dst);
    case KvFormat::kInt4:
      return kernels::kv_quantize_row(x, d, 4, dst);
  }
  return 0.f;
}

float decode_element(const uint8_t* row, int i, KvFormat f, float scale) {
  switch (f) {
    case KvFormat::kF32: {
      float v;
      std::memcpy(&v, row + 4 * i, 4);
      return v;
    }
    case KvFormat::kF16:
    case KvFormat::kBF16: {
      uint16_t b;
      std::memcpy(&b, row + 2 * i, 2);
      return f == KvFormat::kF16 ? f16_value(b) : bf16_value(b);
    }
    case KvFormat::kInt8:
      return static_cast<float>(kernels::kv_quant_element(row, i, 8)) * scale;
    case KvFormat::kInt4:
      return static_cast<float>(kernels::kv_quant_element(row, i, 4)) * scale;
  }
  return 0.f;
}

void attend_head(const float* q, const float* k, const float* v, int n, int d, float scale, float* out) {
  attend_window(q, k, v, 0, n, d, scale, 0.f, out);
}

void attend_window(const float* q, const float* k, const float* v, int start, int end, int d, float scale,
                   float softcap, float* out) {
  const int n = end - start;
  std::vector<double> s(static_cast<size_t>(n));
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < n; ++j) {
    const int64_t p = start + j;
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += static_cast<double>(q[i]) * k[p * d + i];
    double e = dot * scale;
    if (softcap > 0) e = softcap * std::tanh(e / softcap);
    s[static_cast<size_t>(j)] = e;
    m = std::max(m, e);
  }
  double tot = 0;
  for (auto& e : s) tot += (e = std::exp(e - m));
  for (int i = 0; i < d; ++i) {
    double acc = 0;
    for (int j = 0; j < n; ++j) acc += s[static_cast<size_t>(j)] * v[static_cast<int64_t>(start + j) * d + i];
    out[i] = static_cast<float>(acc / tot);
  }
}

void swiglu(const float* gu, int rows, int f, float* out) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < f; ++j) {
      const double g = gu[static_cast<int64_t>(r) * 2 * f + j],
                   u = gu[static_cast<int64_t>(r) * 2 * f + f + j];
      out[static_cast<int64_t>(r) * f + j] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
}

void gelu_gate(const float* gu, int rows, int f, float* out) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < f; ++j) {
      const double g = gu[static_cast<int64_t>(r) * 2 * f + j],
                   u = gu[static_cast<int64_t>(r) * 2 * f + f + j];
      out[static_cast<int64_t>(r) * f + j] = static_cast<float>(
          0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * u);
    }
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
}

void gelu_new(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double u = x[i];
    x[i] =
        static_cast<float>(0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u))));
  }
}

void linear(const float* w, const float* x, int rows, int n_out, int n_in, const float* b, bool accumulate,
            DType dt, float* y) {
  // The inputs rounded once per row (not once per output): the same values, n_out times fewer conversions.
  std::vector<float> xr(static_cast<size_t>(n_in));
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n_in; ++i)
      xr[static_cast<size_t>(i)] = dtype_round(dt, x[static_cast<int64_t>(r) * n_in + i]);
    for (int o = 0; o < n_out; ++o) {
      double acc = 0;
      for (int i = 0; i < n_in; ++i)
        acc += static_cast<double>(dtype_round(dt, w[static_cast<int64_t>(o) * n_in + i])) *
               xr[static_cast<size_t>(i)];
      if (b) acc += b[o];
      float& dst = y[static_cast<int64_t>(r) * n_out + o];
      dst = accumulate ? static_cast<float>(dst + acc) : static_cast<float>(acc);
    }
  }
}

void linear_q8(const int8_t* q, const float* scales, int group, const float* x, int rows, int n_out, int n_in,
               const float* b, bool accumulate, float* y) {
  const int n_groups = (n_in + group - 1) / group;
  std::vector<float> wr(static_cast<size_t>(n_in));
  for (int o = 0; o < n_out; ++o) {
    // The row dequantized once (float(q) · s, one fp32 rounding: quant.h's dequantize()), used for every row.
    for (int i = 0; i < n_in; ++i)
      wr[static_cast<size_t>(i)] = static_cast<float>(q[static_cast<int64_t>(o) * n_in + i]) *
                                   scales[static_cast<int64_t>(o) * n_groups + i / group];
    for (int r = 0; r < rows; ++r) {
      double acc = 0;
      for (int i = 0; i < n_in; ++i)
        acc += static_cast<double>(wr[static_cast<size_t>(i)]) * x[static_cast<int64_t>(r) * n_in + i];
      if (b) acc += b[o];
      float& dst = y[static_cast<int64_t>(r) * n_out + o];
      dst = accumulate ? static_cast<float>(dst + acc) : static_cast<float>(acc);
    }
  }
}

int argmax(const float* l, int vocab) {
  int best = 0;  // all -inf / NaN → 0
  float bv = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    const float v = std::isnan(l[i]) ? -std::numeric_limits<float>::infinity() : l[i];
    if (v > bv) best = i, bv = v;  // ties → the lowest id
  }
  return best;
}

namespace {
struct Cand {
  float value;  // logit, then unnormalised probability
  int32_t id;
};
bool before(const Cand& a, const Cand& b) { return a.value > b.value || (a.value == b.value && a.id < b.id); }
}  // namespace

int sample_row(const float* l, int vocab, const SampleParams& sp) {
  if (sp.greedy) return argmax(l, vocab);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<Cand> c(static_cast<size_t>(vocab));
  float l_max = kNegInf;
  for (int i = 0; i < vocab; ++i) {
    const float v = std::isnan(l[i]) ? kNegInf : l[i];
    c[static_cast<size_t>(i)] = Cand{v, i};
    l_max = std::max(l_max, v);
  }
  int n = vocab;
  bool sorted = false;
  // top-k: the k largest logits, (logit desc, id asc); the order stays for top-p
  if (sp.top_k > 0 && sp.top_k < vocab) {
    std::partial_sort(c.begin(), c.begin() + sp.top_k, c.end(), before);
    n = sp.top_k;
    sorted = true;
  }
  // p = exp((l − l_max) / T) with the host's exp, so p_max == 1 exactly
  if (std::isfinite(l_max)) {
    const float inv_t = 1.0f / sp.temperature;
    for (int i = 0; i < n; ++i)
      c[static_cast<size_t>(i)].value =
          std::isfinite(inv_t) ? softmax::exp_nonpositive((c[static_cast<size_t>(i)].value - l_max) * inv_t)
                               : std::exp((c[static_cast<size_t>(i)].value - l_max) / sp.temperature);
  } else {  // all -inf, or some +inf: the tokens at l_max share the mass
    for (int i = 0; i < n; ++i) c[static_cast<size_t>(i)].value = c[static_cast<size_t>(i)].value == l_max ? 1.f : 0.f;
  }
  // top-p: the fewest most likely tokens whose mass reaches top_p of the total (sum in the current order)
  if (sp.top_p < 1.0f) {
    double total = 0;
    for (int i = 0; i < n; ++i) total += c[static_cast<size_t>(i)].value;
    const double target = static_cast<double>(sp.top_p) * total;
    if (!sorted) std::sort(c.begin(), c.begin() + n, before);
    sorted = true;
    double cum = 0;
    for (int i = 0; i < n; ++i) {
      cum += c[static_cast<size_t>(i)].value;
      if (cum >= target) {
        n = i + 1;
        break;
      }
    }
  }
  // min-p: p / p_max >= min_p with p_max == 1 (stable)
  if (sp.min_p > 0.0f) {
    int j = 0;
    for (int i = 0; i < n; ++i)
      if (c[static_cast<size_t>(i)].value >= sp.min_p) c[static_cast<size_t>(j++)] = c[static_cast<size_t>(i)];
    n = j;
  }
  // the draw: the first kept token whose cumulative mass exceeds u · total
  double total = 0;
  for (int i = 0; i < n; ++i) total += c[static_cast<size_t>(i)].value;
  const double r = sp.u * total;
  double cum = 0;
  for (int i = 0; i < n; ++i) {
    cum += c[static_cast<size_t>(i)].value;
    if (cum > r) return c[static_cast<size_t>(i)].id;
  }
  for (int i = n - 1; i > 0; --i)  // r rounded up to the total: the last kept token with weight
    if (c[static_cast<size_t>(i)].value > 0.0f) return c[static_cast<size_t>(i)].id;
  return c[0].id;
}

void apply_token_mask(float* l, int vocab, const uint32_t* mask) {
  for (int i = 0; i < vocab; ++i)
    if (!((mask[i >> 5] >> (i & 31)) & 1u)) l[i] = -std::numeric_limits<float>::infinity();
}

}  // namespace frost::cuda::ref
