// kvsplice KV storage (core/kv/kvsplice.h): per token, the latents c_k [r_k], c_v [r_v] of the layer's K and
// V rows, in regions [block_tokens, r_k] and [block_tokens, r_v] of each block (core/kv/kv_pages.h), written
// by index: fp16, or int8 with one fp32 scale per row (regions [block_tokens] for K and for V) when the set's
// latent dtype is int8. keys()/values() expand them back (the reference path); attend() works in the latent
// space.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
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
  KvSpliceCodec(std::shared_ptr<const KvSpliceSet> set, int64_t layer, const KvPages* pages,
                const KvLayerFormat& fmt)
      : KvCodec(KvCodecKind::kKvSplice,
                checked(set, layer).latent() == KvLatentDtype::kI8 ? at::kChar : at::kHalf,
                set->bytes_per_token_layer(), pages),
        set_(std::move(set)),
        layer_(layer),
        fmt_(fmt) {
    int8_ = set_->latent() == KvLatentDtype::kI8;
    tmp_.resize(static_cast<size_t>(set_->dims().d() + std::max(set_->rank_k(), set_->rank_v())));
  }

  void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) override {
    const int64_t T = k.size(0), d = set_->dims().d();
    TORCH_CHECK(k.dim() == 3 && k.size(1) * k.size(2) == d && v.sizes() == k.sizes(),
                "KvSpliceCodec::append: K ", k.sizes(), " V ", v.sizes(),
                " (expected [T, Hkv, D] with Hkv·D = ", d, ")");
    TORCH_CHECK(pos >= 0 && pos + T <= capacity(), "KvSpliceCodec::append: positions ", pos, "..", pos + T,
                " exceed capacity ", capacity());
    at::NoGradGuard ng;
    store(set_->k(layer_).encode(k.to(at::kFloat).reshape({T, d})), fmt_.k, fmt_.ks, pos);
    store(set_->v(layer_).encode(v.to(at::kFloat).reshape({T, d})), fmt_.v, fmt_.vs, pos);
  }

  void append_token(const float* k, const float* v, int64_t pos) override {
    TORCH_CHECK(pos >= 0 && pos < capacity(), "KvSpliceCodec::append_token: position ", pos,
                " exceeds capacity ", capacity());
    float* c = tmp_.data();
    float* scratch = c + std::max(set_->rank_k(), set_->rank_v());
    const KvSpliceFast& fk = set_->fast_k(layer_);
    fk.encode(k, c, scratch);
    write_row(c, fk.r, fmt_.k, fmt_.ks, pos);
    const KvSpliceFast& fv = set_->fast_v(layer_);
    fv.encode(v, c, scratch);
    write_row(c, fv.r, fmt_.v, fmt_.vs, pos);
  }

  at::Tensor keys_span(int64_t start, int64_t n) const override {
    return expand(set_->k(layer_), fmt_.k, fmt_.ks, start, n);
  }
  at::Tensor values_span(int64_t start, int64_t n) const override {
    return expand(set_->v(layer_), fmt_.v, fmt_.vs, start, n);
  }

  void attend(const float* q, int64_t n_head, int64_t n, float scale, int64_t h0, int64_t h1,
              float* out) const override {
    check_attend(n);
    const KvPagedRows none;
    kvsplice_attend(set_->fast_k(layer_), set_->fast_v(layer_), q, KvPagedRows(*pages_, fmt_.k),
                    KvPagedRows(*pages_, fmt_.v), int8_ ? KvPagedRows(*pages_, fmt_.ks) : none,
                    int8_ ? KvPagedRows(*pages_, fmt_.vs) : none, int8_, n_head, set_->dims().n_head_kv,
                    set_->dims().head_dim, n, scale, h0, h1, out);
  }

 private:
  // The set, checked before the base reads it.
  static const KvSpliceSet& checked(const std::shared_ptr<const KvSpliceSet>& set, int64_t layer) {
    TORCH_CHECK(set && layer >= 0 && layer < set->dims().n_layers, "KvSpliceCodec: layer ", layer,
                " out of range");
    return *set;
  }

  // Latent rows c [T, r] into a region (and scales) at pos.
  void store(const at::Tensor& c, const KvRegion& rows, const KvRegion& scales, int64_t pos) {
    const at::Tensor cc = c.contiguous();
    const int64_t T = cc.size(0), r = cc.size(1);
    for (int64_t i = 0; i < T; ++i) {
      const float* src = cc.data_ptr<float>() + i * r;
      if (!int8_) {
        write_row(src, r, rows, scales, pos + i);
        continue;
      }
      // int8: the LibTorch rounding of the reference (round half to even), one scale per row
      float mx = 0;
      for (int64_t k = 0; k < r; ++k) mx = std::max(mx, std::fabs(src[k]));
      const float s = mx / kQ;
      const float safe = s > 0 ? s : 1.f;
      uint8_t* blk = pages_->block_of(pos + i);
      const int64_t row = (pos + i) % pages_->block_tokens;
      int8_t* dst = reinterpret_cast<int8_t*>(blk + rows.off + row * rows.row_bytes);
      for (int64_t k = 0; k < r; ++k)
        dst[k] = static_cast<int8_t>(std::clamp(std::nearbyint(src[k] / safe), -kQ, kQ));
      reinterpret_cast<float*>(blk + scales.off)[row] = s;
    }
  }

  void write_row(const float* c, int64_t r, const KvRegion& rows, const KvRegion& scales, int64_t pos) const {
    uint8_t* blk = pages_->block_of(pos);
    const int64_t row = pos % pages_->block_tokens;
    if (!int8_) {
      c10::Half* dst = reinterpret_cast<c10::Half*>(blk + rows.off + row * rows.row_bytes);
      for (int64_t i = 0; i < r; ++i) dst[i] = static_cast<c10::Half>(c[i]);
      return;
    }
    float mx = 0;
    for (int64_t i = 0; i < r; ++i) mx = std::max(mx, std::fabs(c[i]));
    const float s = mx / kQ, inv = s > 0 ? 1.f / s : 1.f;
    int8_t* dst = reinterpret_cast<int8_t*>(blk + rows.off + row * rows.row_bytes);
    for (int64_t i = 0; i < r; ++i)
      dst[i] = static_cast<int8_t>(std::clamp(std::nearbyint(c[i] * inv), -kQ, kQ));
    reinterpret_cast<float*>(blk + scales.off)[row] = s;
  }

  // The reference path (and attend_window): the cached rows [start, n) expanded, [Hkv, n - start, D].
  at::Tensor expand(const LearnedKvSplice& sp, const KvRegion& rows, const KvRegion& scales, int64_t start,
                    int64_t n) const {
    at::NoGradGuard ng;
    const KvSpliceDims& dm = set_->dims();
    const int64_t m = n - start;
    at::Tensor c = kv_gather(*pages_, rows, start, n, storage_dtype()).squeeze(0).to(at::kFloat);  // [m, r]
    if (int8_) c = c * kv_gather(*pages_, scales, start, n, at::kFloat).reshape({m, 1});
    return sp.decode(c).view({m, dm.n_head_kv, dm.head_dim}).transpose(0, 1).contiguous();
  }

  std::shared_ptr<const KvSpliceSet> set_;
  int64_t layer_;
  KvLayerFormat fmt_;
  bool int8_ = false;
  std::vector<float> tmp_;  // encode scratch (a codec belongs to one sequence: not shared)
};

}  // namespace

std::unique_ptr<KvCodec> make_kvsplice_paged_codec(std::shared_ptr<const KvSpliceSet> set, int64_t layer,
                                                   const KvPages* pages, const KvLayerFormat& fmt) {
  return std::make_unique<KvSpliceCodec>(std::move(set), layer, pages, fmt);
}

}  // namespace frost
