// int8 / int4 KV storage with per-token, per-head scales (DESIGN.md, "The KV pipeline", step 2).
//
// Quantisation (choice: symmetric, round to nearest, no zero point): for each token t and kv head
// g, s = max_i |x_i| / Q with Q = 127 (int8) or 7 (int4); q_i = clamp(round(x_i / s), -Q, Q);
// decoded x̂_i = s · q_i. A row of zeros gets s = 0 (decodes to zeros). The error per element is at
// most s / 2. int4 packs two values per byte: element 2j in the low nibble, 2j+1 in the high
// nibble, two's complement (−8..7; −8 is never written). Scales are fp32.
//
// Layout: K and V each [Hkv, Tmax, D] int8 (or [Hkv, Tmax, D/2] bytes for int4), scales
// [Hkv, Tmax] fp32. Bytes per token and layer: 2·Hkv·(D + 4) for int8, 2·Hkv·(D/2 + 4) for int4.
#include <ATen/ATen.h>

#include <cmath>

#include "core/kv/codec.h"

namespace frost {
namespace {

class QuantCodec final : public KvCodec {
 public:
  QuantCodec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim, int64_t max_tokens)
      : kind_(kind),
        n_head_kv_(n_head_kv),
        head_dim_(head_dim),
        max_tokens_(max_tokens),
        row_bytes_(kind == KvCodecKind::kInt4 ? head_dim / 2 : head_dim) {
    TORCH_CHECK(kind == KvCodecKind::kInt8 || kind == KvCodecKind::kInt4, "QuantCodec: not a quantised kind");
    TORCH_CHECK(kind != KvCodecKind::kInt4 || head_dim % 2 == 0, "int4 kv codec needs an even head_dim, got ",
                head_dim);
    const auto dt = kind == KvCodecKind::kInt8 ? at::kChar : at::kByte;
    k_ = at::empty({n_head_kv, max_tokens, row_bytes_}, at::TensorOptions().dtype(dt));
    v_ = at::empty({n_head_kv, max_tokens, row_bytes_}, at::TensorOptions().dtype(dt));
    ks_ = at::empty({n_head_kv, max_tokens}, at::kFloat);
    vs_ = at::empty({n_head_kv, max_tokens}, at::kFloat);
  }

  void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) override {
    const int64_t t = k.size(0);
    TORCH_CHECK(k.dim() == 3 && k.size(1) == n_head_kv_ && k.size(2) == head_dim_, "kv append: bad k shape ",
                k.sizes());
    TORCH_CHECK(v.sizes() == k.sizes(), "kv append: v shape ", v.sizes(), " != k shape ", k.sizes());
    TORCH_CHECK(pos >= 0 && pos + t <= max_tokens_, "kv append: positions [", pos, ", ", pos + t,
                ") exceed capacity ", max_tokens_);
    at::Tensor kc = k.to(at::kFloat).contiguous(), vc = v.to(at::kFloat).contiguous();
    for (int64_t i = 0; i < t; ++i)
      append_token(kc.data_ptr<float>() + i * n_head_kv_ * head_dim_,
                   vc.data_ptr<float>() + i * n_head_kv_ * head_dim_, pos + i);
  }

  void append_token(const float* k, const float* v, int64_t pos) override {
    TORCH_CHECK(pos >= 0 && pos < max_tokens_, "kv append: position ", pos, " exceeds capacity ",
                max_tokens_);
    for (int64_t h = 0; h < n_head_kv_; ++h) {
      const int64_t row = h * max_tokens_ + pos;
      ks_.data_ptr<float>()[row] =
          encode_row(k + h * head_dim_, static_cast<uint8_t*>(k_.data_ptr()) + row * row_bytes_);
      vs_.data_ptr<float>()[row] =
          encode_row(v + h * head_dim_, static_cast<uint8_t*>(v_.data_ptr()) + row * row_bytes_);
    }
  }

  at::Tensor keys(int64_t n) const override { return decoded(k_, ks_, n); }
  at::Tensor values(int64_t n) const override { return decoded(v_, vs_, n); }
  const void* raw_keys() const override { return k_.data_ptr(); }
  const void* raw_values() const override { return v_.data_ptr(); }
  const float* raw_key_scales() const override { return ks_.data_ptr<float>(); }
  const float* raw_value_scales() const override { return vs_.data_ptr<float>(); }
  at::ScalarType storage_dtype() const override { return k_.scalar_type(); }
  KvCodecKind kind() const override { return kind_; }
  int64_t bytes_per_token() const override { return 2 * n_head_kv_ * (row_bytes_ + 4); }
  int64_t capacity() const override { return max_tokens_; }

 private:
  int q_max() const { return kind_ == KvCodecKind::kInt8 ? 127 : 7; }

  // Quantises one head row of D floats into dst; returns its scale.
  float encode_row(const float* x, uint8_t* dst) const {
    float amax = 0;
    for (int64_t i = 0; i < head_dim_; ++i) amax = std::max(amax, std::fabs(x[i]));
    const int qm = q_max();
    const float s = amax > 0 && std::isfinite(amax) ? amax / static_cast<float>(qm) : 0.f;
    const float inv = s > 0 ? 1.f / s : 0.f;
    auto quant = [&](float xi) {
      const float r = std::nearbyint(xi * inv);
      return static_cast<int>(std::clamp(r, static_cast<float>(-qm), static_cast<float>(qm)));
    };
    if (kind_ == KvCodecKind::kInt8) {
      auto* d = reinterpret_cast<int8_t*>(dst);
      for (int64_t i = 0; i < head_dim_; ++i) d[i] = static_cast<int8_t>(quant(x[i]));
    } else {
      for (int64_t j = 0; j < head_dim_ / 2; ++j) {
        const int lo = quant(x[2 * j]), hi = quant(x[2 * j + 1]);
        dst[j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      }
    }
    return s;
  }

  at::Tensor decoded(const at::Tensor& store, const at::Tensor& scales, int64_t n) const {
    TORCH_CHECK(n >= 0 && n <= max_tokens_, "kv read: ", n, " tokens exceed capacity ", max_tokens_);
    at::Tensor q;
    if (kind_ == KvCodecKind::kInt8) {
      q = store.narrow(1, 0, n).to(at::kFloat);
    } else {
      // sign-extend the nibbles: (b << 4) >> 4 for the low one, b >> 4 for the high one (as int8)
      at::Tensor b = store.narrow(1, 0, n).to(at::kInt);
      at::Tensor lo = b.bitwise_and(0xF), hi = b.bitwise_right_shift(4).bitwise_and(0xF);
      lo = lo - (lo >= 8).to(at::kInt) * 16;
      hi = hi - (hi >= 8).to(at::kInt) * 16;
      q = at::stack({lo, hi}, -1).reshape({n_head_kv_, n, head_dim_}).to(at::kFloat);
    }
    return q * scales.narrow(1, 0, n).unsqueeze(-1);
  }

  KvCodecKind kind_;
  int64_t n_head_kv_, head_dim_, max_tokens_, row_bytes_;
  at::Tensor k_, v_;    // quantised rows
  at::Tensor ks_, vs_;  // [Hkv, Tmax] scales
};

}  // namespace

std::unique_ptr<KvCodec> make_quant_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          int64_t max_tokens) {
  return std::make_unique<QuantCodec>(kind, n_head_kv, head_dim, max_tokens);
}

std::unique_ptr<KvCodec> make_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                    int64_t max_tokens) {
  TORCH_CHECK(kind != KvCodecKind::kKvSplice,
              "make_codec: kvsplice needs a KvSpliceSet (make_kvsplice_codec)");
  if (kind == KvCodecKind::kInt8 || kind == KvCodecKind::kInt4)
    return make_quant_codec(kind, n_head_kv, head_dim, max_tokens);
  return make_float_codec(kind, n_head_kv, head_dim, max_tokens);
}

}  // namespace frost
