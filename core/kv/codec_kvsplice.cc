// kvsplice KV storage (core/kv/kvsplice.h): per token, the fp16 latents c_k [r_k], c_v [r_v] of the layer's
// K and V rows, [Tmax, r_k] and [Tmax, r_v], written by index. keys()/values() expand them back (the
// reference path).
#include <ATen/ATen.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <vector>

#include "core/kv/codec.h"
#include "core/kv/kvsplice.h"

namespace frost {
namespace {

class KvSpliceCodec final : public KvCodec {
 public:
  KvSpliceCodec(std::shared_ptr<const KvSpliceSet> set, int64_t layer, int64_t max_tokens)
      : set_(std::move(set)), layer_(layer), max_tokens_(max_tokens) {
    TORCH_CHECK(set_ && layer >= 0 && layer < set_->dims().n_layers, "KvSpliceCodec: layer ", layer,
                " out of range");
    const int64_t rk = set_->rank_k(), rv = set_->rank_v();
    ck_ = at::empty({max_tokens, rk}, at::kHalf);
    cv_ = at::empty({max_tokens, rv}, at::kHalf);
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
    const LearnedKvSplice& sk = set_->k(layer_);
    const LearnedKvSplice& sv = set_->v(layer_);
    ck_.narrow(0, pos, T).copy_(sk.encode(k.to(at::kFloat).reshape({T, d})));
    cv_.narrow(0, pos, T).copy_(sv.encode(v.to(at::kFloat).reshape({T, d})));
  }

  void append_token(const float* k, const float* v, int64_t pos) override {
    TORCH_CHECK(pos >= 0 && pos < max_tokens_, "KvSpliceCodec::append_token: position ", pos,
                " exceeds capacity ", max_tokens_);
    float* c = tmp_.data();
    float* scratch = c + std::max(set_->rank_k(), set_->rank_v());
    write(set_->fast_k(layer_), k, ck_.data_ptr<c10::Half>() + pos * set_->rank_k(), c, scratch);
    write(set_->fast_v(layer_), v, cv_.data_ptr<c10::Half>() + pos * set_->rank_v(), c, scratch);
  }

  at::Tensor keys(int64_t n) const override { return expand(set_->k(layer_), ck_, n); }
  at::Tensor values(int64_t n) const override { return expand(set_->v(layer_), cv_, n); }

  const void* raw_keys() const override { return ck_.data_ptr(); }
  const void* raw_values() const override { return cv_.data_ptr(); }
  at::ScalarType storage_dtype() const override { return at::kHalf; }
  const KvSpliceFast* splice_k() const override { return &set_->fast_k(layer_); }
  const KvSpliceFast* splice_v() const override { return &set_->fast_v(layer_); }
  const LearnedKvSplice* learned_k() const override { return &set_->k(layer_); }
  const LearnedKvSplice* learned_v() const override { return &set_->v(layer_); }
  KvCodecKind kind() const override { return KvCodecKind::kKvSplice; }
  int64_t bytes_per_token() const override { return (set_->rank_k() + set_->rank_v()) * 2; }
  int64_t capacity() const override { return max_tokens_; }

 private:
  static void write(const KvSpliceFast& f, const float* x, c10::Half* dst, float* c, float* scratch) {
    f.encode(x, c, scratch);
    for (int64_t i = 0; i < f.r; ++i) dst[i] = static_cast<c10::Half>(c[i]);
  }

  // The reference path: every cached row expanded, [Hkv, n, D].
  at::Tensor expand(const LearnedKvSplice& sp, const at::Tensor& lat, int64_t n) const {
    TORCH_CHECK(n >= 0 && n <= max_tokens_, "KvSpliceCodec: read of ", n, " rows, capacity ", max_tokens_);
    at::NoGradGuard ng;
    const KvSpliceDims& dm = set_->dims();
    return sp.decode(lat.narrow(0, 0, n).to(at::kFloat))
        .view({n, dm.n_head_kv, dm.head_dim})
        .transpose(0, 1)
        .contiguous();
  }

  std::shared_ptr<const KvSpliceSet> set_;
  int64_t layer_, max_tokens_;
  at::Tensor ck_, cv_;      // [Tmax, r_k], [Tmax, r_v] fp16
  std::vector<float> tmp_;  // encode scratch (a codec belongs to one sequence: not shared)
};

}  // namespace

std::unique_ptr<KvCodec> make_kvsplice_codec(std::shared_ptr<const KvSpliceSet> set, int64_t layer,
                                             int64_t max_tokens) {
  return std::make_unique<KvSpliceCodec>(std::move(set), layer, max_tokens);
}

}  // namespace frost
