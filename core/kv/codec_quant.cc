// int8 / int4 KV storage with per-token, per-head scales (docs/kv_repair.md, "Pipeline, per attention layer").
//
// Quantisation (choice: symmetric, round to nearest, no zero point): for each token t and kv head
// g, s = max_i |x_i| / Q with Q = 127 (int8) or 7 (int4); q_i = clamp(round(x_i / s), -Q, Q);
// decoded x̂_i = s · q_i. A row of zeros gets s = 0 (decodes to zeros). The error per element is at
// most s / 2. int4 packs two values per byte: element 2j in the low nibble, 2j+1 in the high
// nibble, two's complement (−8..7; −8 is never written). Scales are fp32.
//
// Layout in each block (core/kv/kv_pages.h): K and V regions [Hkv, block_tokens, D] int8 (or D/2 bytes for
// int4), scale regions [Hkv, block_tokens] fp32. Bytes per token and layer: 2·Hkv·(D + 4) for int8,
// 2·Hkv·(D/2 + 4) for int4.
#include <ATen/ATen.h>

#include <cmath>

#include "core/kv/attend.h"
#include "core/kv/codec.h"
#include "kernels/cpu/kv_quant_row.h"

namespace frost {
namespace {

class QuantCodec final : public KvCodec {
 public:
  QuantCodec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim, const KvPages* pages,
             const KvLayerFormat& fmt)
      : KvCodec(kind, kind == KvCodecKind::kInt8 ? at::kChar : at::kByte,
                2 * n_head_kv * ((kind == KvCodecKind::kInt4 ? head_dim / 2 : head_dim) + 4), pages),
        n_head_kv_(n_head_kv),
        head_dim_(head_dim),
        row_bytes_(kind == KvCodecKind::kInt4 ? head_dim / 2 : head_dim),
        fmt_(fmt) {
    TORCH_CHECK(kind == KvCodecKind::kInt8 || kind == KvCodecKind::kInt4, "QuantCodec: not a quantised kind");
    TORCH_CHECK(kind != KvCodecKind::kInt4 || head_dim % 2 == 0, "int4 kv codec needs an even head_dim, got ",
                head_dim);
  }

  void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) override {
    const int64_t t = k.size(0);
    TORCH_CHECK(k.dim() == 3 && k.size(1) == n_head_kv_ && k.size(2) == head_dim_, "kv append: bad k shape ",
                k.sizes());
    TORCH_CHECK(v.sizes() == k.sizes(), "kv append: v shape ", v.sizes(), " != k shape ", k.sizes());
    TORCH_CHECK(pos >= 0 && pos + t <= capacity(), "kv append: positions [", pos, ", ", pos + t,
                ") exceed capacity ", capacity());
    at::Tensor kc = k.to(at::kFloat).contiguous(), vc = v.to(at::kFloat).contiguous();
    for (int64_t i = 0; i < t; ++i)
      append_token(kc.data_ptr<float>() + i * n_head_kv_ * head_dim_,
                   vc.data_ptr<float>() + i * n_head_kv_ * head_dim_, pos + i);
  }

  void append_token(const float* k, const float* v, int64_t pos) override {
    TORCH_CHECK(pos >= 0 && pos < capacity(), "kv append: position ", pos, " exceeds capacity ", capacity());
    uint8_t* blk = pages_->block_of(pos);
    const int64_t bt = pages_->block_tokens, r = pos % bt;
    for (int64_t h = 0; h < n_head_kv_; ++h) {
      const int64_t row = h * bt + r;
      reinterpret_cast<float*>(blk + fmt_.ks.off)[row] =
          encode_row(k + h * head_dim_, blk + fmt_.k.off + row * row_bytes_);
      reinterpret_cast<float*>(blk + fmt_.vs.off)[row] =
          encode_row(v + h * head_dim_, blk + fmt_.v.off + row * row_bytes_);
    }
  }

  at::Tensor keys_span(int64_t start, int64_t n) const override { return decoded(fmt_.k, fmt_.ks, start, n); }
  at::Tensor values_span(int64_t start, int64_t n) const override { return decoded(fmt_.v, fmt_.vs, start, n); }

  void attend(const float* q, int64_t n_head, int64_t n, float scale, int64_t h0, int64_t h1,
              float* out) const override {
    check_attend(n);
    kernels::attend_paged_quant(q, KvPagedRows(*pages_, fmt_.k), KvPagedRows(*pages_, fmt_.ks),
                                KvPagedRows(*pages_, fmt_.v), KvPagedRows(*pages_, fmt_.vs),
                                kind() == KvCodecKind::kInt4 ? 4 : 8, n_head, n_head_kv_, head_dim_, n, scale,
                                h0, h1, out);
  }

  void attend_rows(const float* const* q, const int64_t* n, int64_t n_rows, int64_t n_head, float scale,
                   int64_t h0, int64_t h1, float* const* out) const override {
    for (int64_t r = 0; r < n_rows; ++r) check_attend(n[r]);
    kernels::attend_paged_quant_rows(q, n, n_rows, KvPagedRows(*pages_, fmt_.k),
                                     KvPagedRows(*pages_, fmt_.ks), KvPagedRows(*pages_, fmt_.v),
                                     KvPagedRows(*pages_, fmt_.vs), kind() == KvCodecKind::kInt4 ? 4 : 8,
                                     n_head, n_head_kv_, head_dim_, scale, h0, h1, out);
  }

  void attend_window(const float* q, int64_t n_head, int64_t start, int64_t n, float scale, float softcap, int64_t h0,
                     int64_t h1, float* out) const override {
    check_window(start, n);
    kernels::attend_paged_quant_span(q, KvPagedRows(*pages_, fmt_.k), KvPagedRows(*pages_, fmt_.ks),
                                     KvPagedRows(*pages_, fmt_.v), KvPagedRows(*pages_, fmt_.vs),
                                     kind() == KvCodecKind::kInt4 ? 4 : 8, n_head, n_head_kv_, head_dim_, start, n,
                                     scale, softcap, h0, h1, out);
  }

 private:
  // Quantises one head row of D floats into dst; returns its scale (kernels/cpu/kv_quant_row.h: the one
  // definition, shared with the CUDA append kernel's twin).
  float encode_row(const float* x, uint8_t* dst) const {
    return kernels::kv_quantize_row(x, head_dim_, kind() == KvCodecKind::kInt4 ? 4 : 8, dst);
  }

  at::Tensor decoded(const KvRegion& rows, const KvRegion& scale_region, int64_t start, int64_t n) const {
    at::Tensor store = kv_gather(*pages_, rows, start, n, storage_dtype());                  // [Hkv, m, row_bytes]
    at::Tensor scales = kv_gather(*pages_, scale_region, start, n, at::kFloat).squeeze(-1);  // [Hkv, m]
    const int64_t m = n - start;
    at::Tensor q;
    if (kind() == KvCodecKind::kInt8) {
      q = store.to(at::kFloat);
    } else {
      // sign-extend the nibbles: (b << 4) >> 4 for the low one, b >> 4 for the high one (as int8)
      at::Tensor b = store.to(at::kInt);
      at::Tensor lo = b.bitwise_and(0xF), hi = b.bitwise_right_shift(4).bitwise_and(0xF);
      lo = lo - (lo >= 8).to(at::kInt) * 16;
      hi = hi - (hi >= 8).to(at::kInt) * 16;
      q = at::stack({lo, hi}, -1).reshape({n_head_kv_, m, head_dim_}).to(at::kFloat);
    }
    return q * scales.unsqueeze(-1);
  }

  int64_t n_head_kv_, head_dim_, row_bytes_;
  KvLayerFormat fmt_;
};

}  // namespace

std::unique_ptr<KvCodec> make_quant_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          const KvPages* pages, const KvLayerFormat& fmt) {
  return std::make_unique<QuantCodec>(kind, n_head_kv, head_dim, pages, fmt);
}

}  // namespace frost
