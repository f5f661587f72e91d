#include "core/kv/kv_pages.h"

namespace frost {
namespace {

constexpr int64_t kAlign = 64;
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Assigns offsets for `tokens` positions; returns the bytes used.
int64_t place(std::vector<KvLayerFormat>& layers, std::vector<KvLayerFormat>& reverse, int64_t tokens) {
  int64_t off = 0;
  auto put = [&](KvRegion& r) {
    if (r.groups <= 0 || r.row_bytes <= 0) {
      r.off = -1;
      return;
    }
    r.off = off;
    off += align_up(r.groups * tokens * r.row_bytes);
  };
  for (auto* v : {&layers, &reverse})
    for (KvLayerFormat& f : *v)
      for (KvRegion* r : {&f.k, &f.v, &f.ks, &f.vs}) put(*r);
  return off;
}

}  // namespace

int64_t KvLayout::bytes_per_token() const {
  int64_t b = 0;
  for (const auto* v : {&layers, &reverse})
    for (const KvLayerFormat& f : *v) b += f.bytes_per_token();
  return b;
}

int64_t kv_block_bytes_for(const std::vector<KvLayerFormat>& layers, const std::vector<KvLayerFormat>& reverse,
                           int64_t tokens) {
  std::vector<KvLayerFormat> l = layers, r = reverse;
  return place(l, r, tokens);
}

KvLayout make_kv_layout(std::vector<KvLayerFormat> layers, std::vector<KvLayerFormat> reverse,
                        int64_t block_bytes) {
  KvLayout out;
  out.block_bytes = block_bytes;
  out.layers = std::move(layers);
  out.reverse = std::move(reverse);
  const int64_t per_token = out.bytes_per_token();
  int64_t n = per_token > 0 ? block_bytes / per_token : 0;
  // Alignment padding can push the first guess over: step down until it fits.
  while (n > 0 && kv_block_bytes_for(out.layers, out.reverse, n) > block_bytes) --n;
  out.block_tokens = n;
  place(out.layers, out.reverse, n);
  return out;
}

KvLayout kv_layout_for_tokens(std::vector<KvLayerFormat> layers, std::vector<KvLayerFormat> reverse,
                              int64_t tokens) {
  KvLayout out;
  out.layers = std::move(layers);
  out.reverse = std::move(reverse);
  out.block_tokens = tokens;
  out.block_bytes = place(out.layers, out.reverse, tokens);
  return out;
}

}  // namespace frost
