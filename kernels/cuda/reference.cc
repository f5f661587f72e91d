// CPU twins of the CUDA kernels (kernels/cuda/reference.h). Compiled with -ffp-contract=off
// (kernels/cuda/CMakeLists.txt): the float products that must match the device bit for bit stay unfused.
#include "kernels/cuda/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

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
  const _Float16 h = static_cast<_Float16>(f);  // IEEE conversion, round to nearest even
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

float f16_value(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
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
  std::vector<double> s(static_cast<size_t>(n));
  double m = -std::numeric_limits<double>::infinity();
  for (int p = 0; p < n; ++p) {
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += static_cast<double>(q[i]) * k[static_cast<int64_t>(p) * d + i];
    s[static_cast<size_t>(p)] = dot * scale;
    m = std::max(m, s[static_cast<size_t>(p)]);
  }
  double tot = 0;
  for (auto& e : s) tot += (e = std::exp(e - m));
  for (int i = 0; i < d; ++i) {
    double acc = 0;
    for (int p = 0; p < n; ++p) acc += s[static_cast<size_t>(p)] * v[static_cast<int64_t>(p) * d + i];
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

void gelu_new(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double u = x[i];
    x[i] =
        static_cast<float>(0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u))));
  }
}

void linear(const float* w, const float* x, int rows, int n_out, int n_in, const float* b, bool accumulate,
            bool bf16, float* y) {
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < n_out; ++o) {
      double acc = 0;
      for (int i = 0; i < n_in; ++i) {
        float wv = w[static_cast<int64_t>(o) * n_in + i], xv = x[static_cast<int64_t>(r) * n_in + i];
        if (bf16) wv = bf16_round(wv), xv = bf16_round(xv);
        acc += static_cast<double>(wv) * xv;
      }
      if (b) acc += b[o];
      float& dst = y[static_cast<int64_t>(r) * n_out + o];
      dst = accumulate ? static_cast<float>(dst + acc) : static_cast<float>(acc);
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

int sample(const float* l, int vocab, float t, float min_p, double u) {
  const int best = argmax(l, vocab);
  const float lmax = l[best];
  if (!(t > 0.f) || !std::isfinite(lmax)) return best;
  const float xmax = lmax / t;
  std::vector<double> e(static_cast<size_t>(vocab));
  double tot = 0;
  for (int i = 0; i < vocab; ++i) {
    const float x = (std::isnan(l[i]) ? -std::numeric_limits<float>::infinity() : l[i]) / t;
    const float ei = std::exp(x - xmax);
    e[static_cast<size_t>(i)] = ei >= min_p ? ei : 0.f;
    tot += e[static_cast<size_t>(i)];
  }
  const double target = u * tot;
  double c = 0;
  int last = best;
  for (int i = 0; i < vocab; ++i) {
    if (e[static_cast<size_t>(i)] <= 0) continue;
    c += e[static_cast<size_t>(i)];
    last = i;
    if (c > target) return i;
  }
  return last;
}

std::vector<float> forward(const ModelSpec& s, const HostWeights& w, DType weights, KvFormat kvf,
                           const std::vector<int32_t>& tokens) {
  const int T = static_cast<int>(tokens.size()), C = s.dim, H = s.n_head, Hkv = s.n_head_kv, D = s.head_dim;
  const int F = s.ffn_dim, V = s.n_vocab, QKV = s.q_dim() + 2 * s.kv_dim();
  const bool gpt2 = s.arch == Arch::kGpt2, bf = weights == DType::kBF16;
  const int FIN = gpt2 ? F : 2 * F;
  std::vector<float> cos_t, sin_t;
  if (!gpt2) rope_tables(s.max_pos, D, s.rope_theta, &cos_t, &sin_t);
  auto wval = [&](const float* p, int64_t i) { return bf ? bf16_round(p[i]) : p[i]; };
  // x: [T, C]
  std::vector<float> x(static_cast<size_t>(T) * C), h(x.size()), qkv(static_cast<size_t>(T) * QKV),
      att(static_cast<size_t>(T) * s.q_dim()), gu(static_cast<size_t>(T) * FIN),
      a(static_cast<size_t>(T) * F);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < C; ++i) {
      float v = wval(w.tok_embed, static_cast<int64_t>(tokens[t]) * C + i);
      if (gpt2) v += w.pos_embed[static_cast<int64_t>(t) * C + i];
      x[static_cast<size_t>(t) * C + i] = v;
    }
  auto norm = [&](const float* in, const float* nw, const float* nb, int rows, float* out) {
    if (gpt2)
      layernorm(in, nw, nb, rows, C, s.norm_eps, out);
    else
      rmsnorm(in, nw, rows, C, s.norm_eps, out);
  };
  const int64_t rb = kv_row_bytes(kvf, D);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  for (int l = 0; l < s.n_layer; ++l) {
    const HostLayer& L = w.layers[static_cast<size_t>(l)];
    norm(x.data(), L.attn_norm_w, L.attn_norm_b, T, h.data());
    linear(L.wqkv, h.data(), T, QKV, C, L.bqkv, false, bf, qkv.data());
    // K, V of every position through the format, decoded back: [Hkv, T, D]
    std::vector<float> K(static_cast<size_t>(Hkv) * T * D), Vd(K.size());
    std::vector<uint8_t> row(static_cast<size_t>(rb));
    for (int t = 0; t < T; ++t) {
      float* r = qkv.data() + static_cast<int64_t>(t) * QKV;
      if (!gpt2)
        for (int hh = 0; hh < H + Hkv; ++hh) rope_row(r + hh * D, D, cos_t.data(), sin_t.data(), t);
      for (int g = 0; g < Hkv; ++g)
        for (int kv = 0; kv < 2; ++kv) {
          const float* src = r + (H + kv * Hkv + g) * D;
          const float sc = encode_row(src, D, kvf, row.data());
          float* dst = (kv == 0 ? K : Vd).data() + (static_cast<int64_t>(g) * T + t) * D;
          for (int i = 0; i < D; ++i) dst[i] = decode_element(row.data(), i, kvf, sc);
        }
    }
    for (int t = 0; t < T; ++t)
      for (int hh = 0; hh < H; ++hh) {
        const int g = hh / (H / Hkv);
        attend_head(qkv.data() + static_cast<int64_t>(t) * QKV + hh * D,
                    K.data() + static_cast<int64_t>(g) * T * D, Vd.data() + static_cast<int64_t>(g) * T * D,
                    t + 1, D, scale, att.data() + static_cast<int64_t>(t) * s.q_dim() + hh * D);
      }
    linear(L.wo, att.data(), T, C, s.q_dim(), L.bo, true, bf, x.data());
    norm(x.data(), L.mlp_norm_w, L.mlp_norm_b, T, h.data());
    linear(L.w_in, h.data(), T, FIN, C, L.b_in, false, bf, gu.data());
    if (gpt2) {
      gelu_new(gu.data(), static_cast<int64_t>(T) * F);
      linear(L.w_out, gu.data(), T, C, F, L.b_out, true, bf, x.data());
    } else {
      swiglu(gu.data(), T, F, a.data());
      linear(L.w_out, a.data(), T, C, F, L.b_out, true, bf, x.data());
    }
  }
  norm(x.data(), w.final_norm_w, w.final_norm_b, T, h.data());
  std::vector<float> logits(static_cast<size_t>(T) * V);
  linear(w.lm_head ? w.lm_head : w.tok_embed, h.data(), T, V, C, nullptr, false, bf, logits.data());
  return logits;
}

}  // namespace frost::cuda::ref
