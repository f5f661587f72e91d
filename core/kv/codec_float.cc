// fp32 / fp16 / bf16 KV storage: per layer K and V regions [Hkv, block_tokens, D] in each block, written by
// index (core/kv/kv_pages.h).
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>

#include "core/kv/attend.h"
#include "core/kv/codec.h"

namespace frost {
namespace {

at::ScalarType storage_type(KvCodecKind kind) {
  switch (kind) {
    case KvCodecKind::kF32:
      return at::kFloat;
    case KvCodecKind::kF16:
      return at::kHalf;
    case KvCodecKind::kBF16:
      return at::kBFloat16;
    default:
      break;
  }
  TORCH_CHECK(false, "FloatCodec: not a float kind");
}

template <typename T>
void store_row(T* dst, const float* src, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);  // round to nearest even
  }
}

class FloatCodec final : public KvCodec {
 public:
  FloatCodec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim, const KvPages* pages,
             const KvLayerFormat& fmt)
      : KvCodec(kind, storage_type(kind), fmt.bytes_per_token(), pages),
        n_head_kv_(n_head_kv),
        head_dim_(head_dim),
        fmt_(fmt) {}

  void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) override {
    // k, v: [T, Hkv, D] → positions pos..pos+T-1
    const int64_t t = k.size(0);
    TORCH_CHECK(k.dim() == 3 && k.size(1) == n_head_kv_ && k.size(2) == head_dim_, "kv append: bad k shape ",
                k.sizes());
    TORCH_CHECK(v.sizes() == k.sizes(), "kv append: v shape ", v.sizes(), " != k shape ", k.sizes());
    TORCH_CHECK(pos >= 0 && pos + t <= capacity(), "kv append: positions [", pos, ", ", pos + t,
                ") exceed capacity ", capacity());
    const at::Tensor kc = k.to(at::kFloat).contiguous(), vc = v.to(at::kFloat).contiguous();
    const int64_t row = n_head_kv_ * head_dim_;
    for (int64_t i = 0; i < t; ++i)
      append_token(kc.data_ptr<float>() + i * row, vc.data_ptr<float>() + i * row, pos + i);
  }

  void append_token(const float* k, const float* v, int64_t pos) override {
    TORCH_CHECK(pos >= 0 && pos < capacity(), "kv append: position ", pos, " exceeds capacity ", capacity());
    switch (kind()) {
      case KvCodecKind::kF32:
        write_token<float>(k, v, pos);
        break;
      case KvCodecKind::kF16:
        write_token<c10::Half>(k, v, pos);
        break;
      case KvCodecKind::kBF16:
        write_token<c10::BFloat16>(k, v, pos);
        break;
      default:
        TORCH_CHECK(false, "FloatCodec: not a float kind");
    }
  }

  at::Tensor keys_span(int64_t start, int64_t n) const override { return decoded(fmt_.k, start, n); }
  at::Tensor values_span(int64_t start, int64_t n) const override { return decoded(fmt_.v, start, n); }

  void attend(const float* q, int64_t n_head, int64_t n, float scale, int64_t h0, int64_t h1,
              float* out) const override {
    check_attend(n);
    kernels::attend_paged(q, KvPagedRows(*pages_, fmt_.k), KvPagedRows(*pages_, fmt_.v), storage_dtype(),
                          n_head, n_head_kv_, head_dim_, n, scale, h0, h1, out);
  }

  void attend_rows(const float* const* q, const int64_t* n, int64_t n_rows, int64_t n_head, float scale,
                   int64_t h0, int64_t h1, float* const* out) const override {
    for (int64_t r = 0; r < n_rows; ++r) check_attend(n[r]);
    kernels::attend_paged_rows(q, n, n_rows, KvPagedRows(*pages_, fmt_.k), KvPagedRows(*pages_, fmt_.v),
                               storage_dtype(), n_head, n_head_kv_, head_dim_, scale, h0, h1, out);
  }

  void attend_window(const float* q, int64_t n_head, int64_t start, int64_t n, float scale, float softcap, int64_t h0,
                     int64_t h1, float* out) const override {
    check_window(start, n);
    kernels::attend_paged_span(q, KvPagedRows(*pages_, fmt_.k), KvPagedRows(*pages_, fmt_.v), storage_dtype(), n_head,
                               n_head_kv_, head_dim_, start, n, scale, softcap, h0, h1, out);
  }

 private:
  template <typename T>
  void write_token(const float* k, const float* v, int64_t pos) {
    uint8_t* blk = pages_->block_of(pos);
    const int64_t r = pos % pages_->block_tokens, bt = pages_->block_tokens;
    T* kd = reinterpret_cast<T*>(blk + fmt_.k.off);
    T* vd = reinterpret_cast<T*>(blk + fmt_.v.off);
    for (int64_t h = 0; h < n_head_kv_; ++h) {
      const int64_t off = (h * bt + r) * head_dim_;
      store_row(kd + off, k + h * head_dim_, head_dim_);
      store_row(vd + off, v + h * head_dim_, head_dim_);
    }
  }

  at::Tensor decoded(const KvRegion& r, int64_t start, int64_t n) const {
    at::Tensor rows = kv_gather(*pages_, r, start, n, storage_dtype());
    return kind() == KvCodecKind::kF32 ? rows : rows.to(at::kFloat);
  }

  int64_t n_head_kv_, head_dim_;
  KvLayerFormat fmt_;
};

}  // namespace

std::unique_ptr<KvCodec> make_float_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          const KvPages* pages, const KvLayerFormat& fmt) {
  return std::make_unique<FloatCodec>(kind, n_head_kv, head_dim, pages, fmt);
}

}  // namespace frost
