// What every codec shares: the per-layer formats, the gather of stored rows for the reference path, and the
// standalone codec (one private block) that tests, jobs and the bench use without a pool.
#include "core/kv/codec.h"

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>

#include "core/kv/attend.h"
#include "core/kv/kvsplice.h"

namespace frost {

KvLayerFormat kv_layer_format(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                              const KvSpliceSet* splice) {
  KvLayerFormat f;
  switch (kind) {
    case KvCodecKind::kF32:
    case KvCodecKind::kF16:
    case KvCodecKind::kBF16: {
      const int64_t es = kind == KvCodecKind::kF32 ? 4 : 2;
      f.k = f.v = KvRegion{0, n_head_kv, head_dim * es};
      break;
    }
    case KvCodecKind::kInt8:
    case KvCodecKind::kInt4: {
      TORCH_CHECK(kind != KvCodecKind::kInt4 || head_dim % 2 == 0,
                  "int4 kv codec needs an even head_dim, got ", head_dim);
      f.k = f.v = KvRegion{0, n_head_kv, kind == KvCodecKind::kInt8 ? head_dim : head_dim / 2};
      f.ks = f.vs = KvRegion{0, n_head_kv, 4};
      break;
    }
    case KvCodecKind::kKvSplice: {
      TORCH_CHECK(splice, "the kvsplice codec needs a KvSpliceSet (no KVSplice is active)");
      const bool i8 = splice->latent() == KvLatentDtype::kI8;
      f.k = KvRegion{0, 1, splice->rank_k() * (i8 ? 1 : 2)};
      f.v = KvRegion{0, 1, splice->rank_v() * (i8 ? 1 : 2)};
      if (i8) f.ks = f.vs = KvRegion{0, 1, 4};
      break;
    }
  }
  return f;
}

std::unique_ptr<KvCodec> make_paged_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                          const KvPages* pages, const KvLayerFormat& fmt,
                                          std::shared_ptr<const KvSpliceSet> splice, int64_t layer) {
  switch (kind) {
    case KvCodecKind::kInt8:
    case KvCodecKind::kInt4:
      return make_quant_codec(kind, n_head_kv, head_dim, pages, fmt);
    case KvCodecKind::kKvSplice:
      return make_kvsplice_paged_codec(std::move(splice), layer, pages, fmt);
    default:
      return make_float_codec(kind, n_head_kv, head_dim, pages, fmt);
  }
}

at::Tensor kv_gather(const KvPages& p, const KvRegion& r, int64_t start, int64_t n, at::ScalarType dtype) {
  TORCH_CHECK(start >= 0 && start <= n && n <= p.capacity(), "kv read: positions [", start, ", ", n,
              ") exceed capacity ", p.capacity());
  TORCH_CHECK(p.holds_from(start) || start == n, "kv read: positions [", start, ", ", n,
              ") reach blocks the sliding window released (positions below ", p.released_below(),
              " are gone; read the window only)");
  const auto es = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t elems = r.row_bytes / es;
  auto view = [&](size_t b) {
    return at::from_blob(p.base + static_cast<int64_t>(p.table[b]) * p.block_bytes + r.off,
                         {r.groups, p.block_tokens, elems}, at::TensorOptions().dtype(dtype));
  };
  if (start == n) return at::empty({r.groups, 0, elems}, dtype);
  const int64_t b0 = start / p.block_tokens, b1 = (n - 1) / p.block_tokens;
  if (b0 == b1) return view(static_cast<size_t>(b0)).narrow(1, start - b0 * p.block_tokens, n - start);
  std::vector<at::Tensor> parts;
  for (int64_t b = b0; b <= b1; ++b) {
    const int64_t t0 = std::max(start, b * p.block_tokens), t1 = std::min(n, (b + 1) * p.block_tokens);
    parts.push_back(view(static_cast<size_t>(b)).narrow(1, t0 - b * p.block_tokens, t1 - t0));
  }
  return at::cat(parts, 1);
}

namespace {

// A codec with its own storage: one block of max_tokens positions, read and written by a codec over pages.
struct OwnBlock {
  at::Tensor mem;
  KvPages pages;
  std::unique_ptr<KvCodec> inner;
};

std::unique_ptr<OwnBlock> own_block(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim, int64_t max_tokens,
                                    std::shared_ptr<const KvSpliceSet> splice, int64_t layer) {
  TORCH_CHECK(max_tokens > 0, "kv codec: capacity must be positive, got ", max_tokens);
  auto o = std::make_unique<OwnBlock>();
  const KvLayout lay =
      kv_layout_for_tokens({kv_layer_format(kind, n_head_kv, head_dim, splice.get())}, {}, max_tokens);
  // Uninitialised: only rows below the sequence length are ever read, and a cache must be cheap to make.
  o->mem = at::empty({lay.block_bytes + 64}, at::kByte);
  o->pages.base =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(o->mem.data_ptr()) + 63) & ~uintptr_t{63});
  o->pages.block_bytes = lay.block_bytes;
  o->pages.block_tokens = max_tokens;
  o->pages.table = {0};
  o->inner = make_paged_codec(kind, n_head_kv, head_dim, &o->pages, lay.layers[0], std::move(splice), layer);
  return o;
}

}  // namespace

void KvCodec::check_attend(int64_t n) const {
  TORCH_CHECK(n > 0 && n <= capacity(), "kv attend: ", n, " positions, capacity ", capacity());
  TORCH_CHECK(pages_->holds_from(0), "kv attend: positions below ", pages_->released_below(),
              " were released by the sliding window; attend_window reads the window only");
}

void KvCodec::check_window(int64_t start, int64_t n) const {
  TORCH_CHECK(start >= 0 && start < n && n <= capacity(), "kv attend: positions [", start, ", ", n, "), capacity ",
              capacity());
  TORCH_CHECK(pages_->holds_from(start), "kv attend: positions [", start, ", ", n, ") reach blocks the sliding "
              "window released (positions below ", pages_->released_below(), " are gone)");
}

void KvCodec::attend_window(const float* q, int64_t n_head, int64_t start, int64_t n, float scale, float softcap,
                            int64_t h0, int64_t h1, float* out) const {
  check_window(start, n);
  // Only the window's rows are decoded (blocks below it may have been given back, core/kv/kv_pages.h), then the
  // float span kernel attends them as one contiguous block.
  const at::Tensor K = keys_span(start, n).contiguous(), V = values_span(start, n).contiguous();  // [Hkv, m, D]
  const int64_t m = n - start, d = K.size(2), rb = d * static_cast<int64_t>(sizeof(float));
  kernels::attend_paged_span(q, KvPagedRows::contiguous(K.data_ptr(), m, rb), KvPagedRows::contiguous(V.data_ptr(), m, rb),
                             at::kFloat, n_head, K.size(0), d, 0, m, scale, softcap, h0, h1, out);
}

namespace {

class StandaloneCodec final : public KvCodec {
 public:
  explicit StandaloneCodec(std::unique_ptr<OwnBlock> o)
      : KvCodec(o->inner->kind(), o->inner->storage_dtype(), o->inner->bytes_per_token(), &o->pages),
        own_(std::move(o)) {}
  void append(const at::Tensor& k, const at::Tensor& v, int64_t pos) override {
    own_->inner->append(k, v, pos);
  }
  void append_token(const float* k, const float* v, int64_t pos) override {
    own_->inner->append_token(k, v, pos);
  }
  at::Tensor keys_span(int64_t start, int64_t n) const override { return own_->inner->keys_span(start, n); }
  at::Tensor values_span(int64_t start, int64_t n) const override { return own_->inner->values_span(start, n); }
  void attend(const float* q, int64_t n_head, int64_t n, float scale, int64_t h0, int64_t h1,
              float* out) const override {
    own_->inner->attend(q, n_head, n, scale, h0, h1, out);
  }
  void attend_rows(const float* const* q, const int64_t* n, int64_t n_rows, int64_t n_head, float scale,
                   int64_t h0, int64_t h1, float* const* out) const override {
    own_->inner->attend_rows(q, n, n_rows, n_head, scale, h0, h1, out);
  }
  void attend_window(const float* q, int64_t n_head, int64_t start, int64_t n, float scale, float softcap, int64_t h0,
                     int64_t h1, float* out) const override {
    own_->inner->attend_window(q, n_head, start, n, scale, softcap, h0, h1, out);
  }

 private:
  std::unique_ptr<OwnBlock> own_;  // heap-held: pages_ points into it
};

}  // namespace

std::unique_ptr<KvCodec> make_codec(KvCodecKind kind, int64_t n_head_kv, int64_t head_dim,
                                    int64_t max_tokens) {
  TORCH_CHECK(kind != KvCodecKind::kKvSplice,
              "make_codec: kvsplice needs a KvSpliceSet (make_kvsplice_codec)");
  return std::make_unique<StandaloneCodec>(own_block(kind, n_head_kv, head_dim, max_tokens, nullptr, 0));
}

std::unique_ptr<KvCodec> make_kvsplice_codec(std::shared_ptr<const KvSpliceSet> set, int64_t layer,
                                             int64_t max_tokens) {
  TORCH_CHECK(set, "make_kvsplice_codec: no KvSpliceSet");
  const KvSpliceDims d = set->dims();
  return std::make_unique<StandaloneCodec>(
      own_block(KvCodecKind::kKvSplice, d.n_head_kv, d.head_dim, max_tokens, std::move(set), layer));
}

}  // namespace frost
