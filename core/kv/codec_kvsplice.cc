// kvsplice KV storage (core/kv/kvsplice.h): per token, the latents c_k [r_k], c_v [r_v] of the layer's
// K and V rows, [Tmax, r_k] and [Tmax, r_v], written by index: fp16, or int8 with one fp32 scale per row
// ([Tmax] for K and for V) when the set's latent dtype is int8. keys()/values() expand them back (the
// reference path).
#include <ATen/ATen.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kv/codec.h"
#include "core/kv/kvsplice.h"

namespace frost {
namespace {

constexpr float kQ = 127.f;

class KvSpliceCodec final : public KvCodec {
 public:
  KvSpliceCodec(std::shared_ptr<const KvSpliceSet> set, int64_t layer, int64_t max_tokens)
      : set_(std::move(set)), layer_(layer), max_tokens_(max_tokens) {
    TORCH_CHECK(set_ && layer >= 0 && layer < set_->dims().n_layers, "KvSpliceCodec: layer ", layer,
                " out of range");
    const int64_t rk = set_->rank_k(), rv = set_->rank_v();
    int8_ = set_->latent() == KvLatentDtype::kI8;
    const at::ScalarType dt = int8_ ? at::kChar : at::kHalf;
    ck_ = at::empty({max_tokens, rk}, dt);
    cv_ = at::empty({max_tokens, rv}, dt);
    if (int8_) {
      sk_ = at::empty({max_tokens}, at::kFloat);
      sv_ = at::empty({max_tokens}, at::kFloat);
    }
    tmp_.resize(static_cast<size_t>(set_->dims().d() + std::max(rk, rv)));
  }

  void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) override {
    const int64_t T = k.size(0), d = set_->dims().d();
    TORCH_CHECK(k.dim() == 3 && k.size(1) * k.size(2) == d && v.sizes() == k.sizes(),
                "KvSpliceCodec::append: K ", k.sizes(), " V ", v.sizes(),
                " (expected [T, Hkv, D] with Hkv·D = ", d, ")");
    TORCH_CHECK(pos >= 0 && pos + T <= max_tokens_, "KvSpliceCodec::append: positions ", pos, "..", pos + T,
                " exceed capacity ", max_tokens_);
    at::NoGradGuard ng;
    store(set_->k(layer_).encode(k.to(at::kFloat).reshape({T, d})), ck_, sk_, pos);
    store(set_->v(layer_).encode(v.to(at::kFloat).reshape({T, d})), cv_, sv_, pos);
  }

  void append_token(const float* k, const float* v, int64_t pos) override {
    TORCH_CHECK(pos >= 0 && pos < max_tokens_, "KvSpliceCodec::append_token: position ", pos,
                " exceeds capacity ", max_tokens_);
    float* c = tmp_.data();
    float* scratch = c + std::max(set_->rank_k(), set_->rank_v());
    write(set_->fast_k(layer_), k, ck_, sk_, pos, c, scratch);
    write(set_->fast_v(layer_), v, cv_, sv_, pos, c, scratch);
  }

  at::Tensor keys(int64_t n) const override { return expand(set_->k(layer_), ck_, sk_, n); }
  at::Tensor values(int64_t n) const override { return expand(set_->v(layer_), cv_, sv_, n); }

  const void* raw_keys() const override { return ck_.data_ptr(); }
  const void* raw_values() const override { return cv_.data_ptr(); }
  at::ScalarType storage_dtype() const override { return ck_.scalar_type(); }
  const float* splice_scales_k() const override { return int8_ ? sk_.data_ptr<float>() : nullptr; }
  const float* splice_scales_v() const override { return int8_ ? sv_.data_ptr<float>() : nullptr; }
  const KvSpliceFast* splice_k() const override { return &set_->fast_k(layer_); }
  const KvSpliceFast* splice_v() const override { return &set_->fast_v(layer_); }
  const LearnedKvSplice* learned_k() const override { return &set_->k(layer_); }
  const LearnedKvSplice* learned_v() const override { return &set_->v(layer_); }
  KvCodecKind kind() const override { return KvCodecKind::kKvSplice; }
  int64_t bytes_per_token() const override { return set_->bytes_per_token_layer(); }
  int64_t capacity() const override { return max_tokens_; }

 private:
  // Latent rows c [T, r] into lat (and scales) at pos.
  void store(const at::Tensor& c, at::Tensor& lat, at::Tensor& sc, int64_t pos) const {
    const int64_t T = c.size(0);
    if (!int8_) {
      lat.narrow(0, pos, T).copy_(c);
      return;
    }
    at::Tensor s = c.abs().amax(1) / kQ;  // [T]
    at::Tensor safe = at::where(s > 0, s, at::ones_like(s));
    lat.narrow(0, pos, T).copy_(at::round(c / safe.unsqueeze(1)).clamp(-kQ, kQ));
    sc.narrow(0, pos, T).copy_(s);
  }

  void write(const KvSpliceFast& f, const float* x, at::Tensor& lat, at::Tensor& sc, int64_t pos, float* c,
             float* scratch) const {
    f.encode(x, c, scratch);
    if (!int8_) {
      c10::Half* dst = lat.data_ptr<c10::Half>() + pos * f.r;
      for (int64_t i = 0; i < f.r; ++i) dst[i] = static_cast<c10::Half>(c[i]);
      return;
    }
    float mx = 0;
    for (int64_t i = 0; i < f.r; ++i) mx = std::max(mx, std::fabs(c[i]));
    const float s = mx / kQ, inv = s > 0 ? 1.f / s : 1.f;
    int8_t* dst = lat.data_ptr<int8_t>() + pos * f.r;
    for (int64_t i = 0; i < f.r; ++i)
      dst[i] = static_cast<int8_t>(std::clamp(std::nearbyint(c[i] * inv), -kQ, kQ));
    sc.data_ptr<float>()[pos] = s;
  }

  // The reference path: every cached row expanded, [Hkv, n, D].
  at::Tensor expand(const LearnedKvSplice& sp, const at::Tensor& lat, const at::Tensor& sc, int64_t n) const {
    TORCH_CHECK(n >= 0 && n <= max_tokens_, "KvSpliceCodec: read of ", n, " rows, capacity ", max_tokens_);
    at::NoGradGuard ng;
    const KvSpliceDims& dm = set_->dims();
    at::Tensor c = lat.narrow(0, 0, n).to(at::kFloat);
    if (int8_) c = c * sc.narrow(0, 0, n).unsqueeze(1);
    return sp.decode(c).view({n, dm.n_head_kv, dm.head_dim}).transpose(0, 1).contiguous();
  }

  std::shared_ptr<const KvSpliceSet> set_;
  int64_t layer_, max_tokens_;
  bool int8_ = false;
  at::Tensor ck_, cv_;      // [Tmax, r_k], [Tmax, r_v]: fp16, or int8
  at::Tensor sk_, sv_;      // int8 latents: per-row scales [Tmax] fp32
  std::vector<float> tmp_;  // encode scratch (a codec belongs to one sequence: not shared)
};

}  // namespace

std::unique_ptr<KvCodec> make_kvsplice_codec(std::shared_ptr<const KvSpliceSet> set, int64_t layer,
                                             int64_t max_tokens) {
  return std::make_unique<KvSpliceCodec>(std::move(set), layer, max_tokens);
}

}  // namespace frost
