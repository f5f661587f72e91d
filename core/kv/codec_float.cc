// fp32 / fp16 / bf16 KV storage: [Hkv, Tmax, D] for K and for V, written by index.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>

#include "core/kv/codec.h"

namespace frost {
namespace {

at::ScalarType storage_type(KvCodecKind kind) {
  switch (kind) {
    case KvCodecKind::kF32: return at::kFloat;
    case KvCodecKind::kF16: return at::kHalf;
    case KvCodecKind::kBF16: return at::kBFloat16;
    default: break;
  }
  return at::kFloat;
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
  FloatCodec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim, int64_t max_tokens)
      : kind_(kind), n_head_kv_(n_head_kv), head_dim_(head_dim), max_tokens_(max_tokens) {
    auto opts = at::TensorOptions().dtype(storage_type(kind));
    // Uninitialised: only rows below the sequence length are ever read, and a per-request
    // cache must be cheap to allocate.
    k_ = at::empty({n_head_kv, max_tokens, head_dim}, opts);
    v_ = at::empty({n_head_kv, max_tokens, head_dim}, opts);
  }

  void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) override {
    // k, v: [T, Hkv, D] → rows pos..pos+T-1 of [Hkv, Tmax, D]
    const int64_t t = k.size(0);
    TORCH_CHECK(k.dim() == 3 && k.size(1) == n_head_kv_ && k.size(2) == head_dim_, "kv append: bad k shape ", k.sizes());
    TORCH_CHECK(v.sizes() == k.sizes(), "kv append: v shape ", v.sizes(), " != k shape ", k.sizes());
    TORCH_CHECK(pos >= 0 && pos + t <= max_tokens_, "kv append: positions [", pos, ", ", pos + t,
                ") exceed capacity ", max_tokens_);
    k_.narrow(1, pos, t).copy_(k.transpose(0, 1));
    v_.narrow(1, pos, t).copy_(v.transpose(0, 1));
  }

  void append_token(const float* k, const float* v, int64_t pos) override {
    TORCH_CHECK(pos >= 0 && pos < max_tokens_, "kv append: position ", pos, " exceeds capacity ", max_tokens_);
    switch (kind_) {
      case KvCodecKind::kF32: write_token<float>(k, v, pos); break;
      case KvCodecKind::kF16: write_token<c10::Half>(k, v, pos); break;
      case KvCodecKind::kBF16: write_token<c10::BFloat16>(k, v, pos); break;
      default: TORCH_CHECK(false, "FloatCodec: not a float kind");
    }
  }

  at::Tensor keys(int64_t n) const override { return decoded(k_, n); }
  at::Tensor values(int64_t n) const override { return decoded(v_, n); }
  const void* raw_keys() const override { return k_.data_ptr(); }
  const void* raw_values() const override { return v_.data_ptr(); }
  at::ScalarType storage_dtype() const override { return k_.scalar_type(); }
  KvCodecKind kind() const override { return kind_; }
  int64_t bytes_per_token() const override {
    return 2 * n_head_kv_ * head_dim_ * static_cast<int64_t>(k_.element_size());
  }
  int64_t capacity() const override { return max_tokens_; }

 private:
  template <typename T>
  void write_token(const float* k, const float* v, int64_t pos) {
    T* kd = static_cast<T*>(k_.data_ptr());
    T* vd = static_cast<T*>(v_.data_ptr());
    for (int64_t h = 0; h < n_head_kv_; ++h) {
      const int64_t off = (h * max_tokens_ + pos) * head_dim_;
      store_row(kd + off, k + h * head_dim_, head_dim_);
      store_row(vd + off, v + h * head_dim_, head_dim_);
    }
  }

  at::Tensor decoded(const at::Tensor& store, int64_t n) const {
    TORCH_CHECK(n >= 0 && n <= max_tokens_, "kv read: ", n, " tokens exceed capacity ", max_tokens_);
    at::Tensor rows = store.narrow(1, 0, n);
    return kind_ == KvCodecKind::kF32 ? rows : rows.to(at::kFloat);
  }

  KvCodecKind kind_;
  int64_t n_head_kv_, head_dim_, max_tokens_;
  at::Tensor k_, v_;  // [Hkv, Tmax, D] in the storage dtype
};

}  // namespace

std::unique_ptr<KvCodec> make_float_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          int64_t max_tokens) {
  return std::make_unique<FloatCodec>(kind, n_head_kv, head_dim, max_tokens);
}

}  // namespace frost
