#include "core/kv/sequence_kv.h"

#include <c10/util/Exception.h>

#include "core/kv/kvsplice.h"

namespace frost {
namespace {

void check_spec(const KvSpec& spec) {
  TORCH_CHECK(spec.n_layer > 0 && spec.n_head_kv > 0 && spec.head_dim > 0 && spec.max_tokens > 0,
              "SequenceKv: invalid spec");
  if (spec.codec == KvCodecKind::kKvSplice) {
    TORCH_CHECK(spec.splice, "SequenceKv: the kvsplice codec needs a KvSpliceSet (no KVSplice is active)");
    const KvSpliceDims& d = spec.splice->dims();
    TORCH_CHECK(d.n_layers == spec.n_layer && d.n_head_kv == spec.n_head_kv && d.head_dim == spec.head_dim,
                "SequenceKv: the KvSpliceSet was made for ", d.n_layers, " layers × ", d.n_head_kv,
                " kv heads × ", d.head_dim, ", the model has ", spec.n_layer, " × ", spec.n_head_kv, " × ",
                spec.head_dim);
  }
  for (int64_t l : spec.reverse_layers) {
    TORCH_CHECK(l >= 0 && l < spec.n_layer, "SequenceKv: reverse layer ", l, " out of range");
    TORCH_CHECK(spec.codec != KvCodecKind::kKvSplice, "SequenceKv: layer ", l,
                " keeps a reverse (q, v) store (SBA) and the kvsplice codec is not supported there: its "
                "splices are fitted to K rows");
  }
}

}  // namespace

void kv_spec_formats(const KvSpec& spec, std::vector<KvLayerFormat>* layers, std::vector<KvLayerFormat>* reverse) {
  layers->clear();
  reverse->clear();
  for (int64_t i = 0; i < spec.n_layer; ++i)
    layers->push_back(kv_layer_format(spec.codec, spec.n_head_kv, spec.head_dim, spec.splice.get()));
  if (!spec.reverse_layers.empty()) {
    reverse->resize(static_cast<size_t>(spec.n_layer));
    for (int64_t l : spec.reverse_layers)
      (*reverse)[static_cast<size_t>(l)] = kv_layer_format(spec.codec, spec.n_head_kv, spec.head_dim, nullptr);
  }
}

int64_t kv_pool_block_bytes(const KvSpec& spec, int64_t block_tokens) {
  KvSpec f = spec;
  f.codec = KvCodecKind::kF32;
  f.splice.reset();
  std::vector<KvLayerFormat> layers, reverse;
  kv_spec_formats(f, &layers, &reverse);
  return kv_block_bytes_for(layers, reverse, block_tokens);
}

KvLayout kv_paged_layout(const KvSpec& spec, int64_t block_bytes) {
  std::vector<KvLayerFormat> layers, reverse;
  kv_spec_formats(spec, &layers, &reverse);
  return make_kv_layout(std::move(layers), std::move(reverse), block_bytes);
}

SequenceKv::SequenceKv(const KvSpec& spec) : spec_(spec) {
  check_spec(spec);
  std::vector<KvLayerFormat> layers, reverse;
  kv_spec_formats(spec, &layers, &reverse);
  layout_ = kv_layout_for_tokens(std::move(layers), std::move(reverse), spec.max_tokens);
  // Uninitialised: only rows below the sequence length are ever read, and a cache must be cheap to make.
  own_ = at::empty({layout_.block_bytes + 64}, at::kByte);
  pages_.base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(own_.data_ptr()) + 63) & ~uintptr_t{63});
  pages_.block_bytes = layout_.block_bytes;
  pages_.block_tokens = layout_.block_tokens;
  pages_.table = {0};
  make_codecs();
}

SequenceKv::SequenceKv(const KvSpec& spec, KvBlockBooks* books, const KvBlockStorage* storage)
    : spec_(spec), books_(books) {
  check_spec(spec);
  TORCH_CHECK(books && storage, "SequenceKv: no block books or storage");
  TORCH_CHECK(books->n_blocks() == storage->n_blocks(), "SequenceKv: books of ", books->n_blocks(),
              " blocks over a storage of ", storage->n_blocks());
  layout_ = storage->layout(spec);
  TORCH_CHECK(layout_.block_tokens > 0, "SequenceKv: one position of this codec (", layout_.bytes_per_token(),
              " bytes) does not fit a ", storage->where(), " pool block of ", storage->block_bytes(), " bytes");
  pages_.base = storage->host_base();
  pages_.block_bytes = storage->block_bytes();
  pages_.block_tokens = layout_.block_tokens;
  if (pages_.base) make_codecs();
}

SequenceKv::~SequenceKv() {
  if (books_) drop_blocks_from(0);
}

void SequenceKv::make_codecs() {
  layers_.reserve(static_cast<size_t>(spec_.n_layer));
  for (int64_t i = 0; i < spec_.n_layer; ++i)
    layers_.push_back(make_paged_codec(spec_.codec, spec_.n_head_kv, spec_.head_dim, &pages_,
                                       layout_.layers[static_cast<size_t>(i)], spec_.splice, i));
  if (!spec_.reverse_layers.empty()) {
    reverse_.resize(static_cast<size_t>(spec_.n_layer));
    for (int64_t l : spec_.reverse_layers)
      reverse_[static_cast<size_t>(l)] = make_paged_codec(spec_.codec, spec_.n_head_kv, spec_.head_dim, &pages_,
                                                          layout_.reverse[static_cast<size_t>(l)], nullptr, l);
  }
}

int64_t SequenceKv::capacity() const { return std::min(spec_.max_tokens, pages_.capacity()); }

void SequenceKv::drop_blocks_from(size_t first) {
  while (pages_.table.size() > first) {
    if (pages_.table.back() != KvPages::kReleased) books_->release(pages_.table.back());  // released: given back
    pages_.table.pop_back();
  }
  pages_.released = std::min(pages_.released, static_cast<int64_t>(pages_.table.size()));
  if (hashes_.size() > first) hashes_.resize(first);
}

int64_t SequenceKv::window_start() const {
  return spec_.window > 0 ? std::max<int64_t>(0, n_tokens_ - spec_.window + 1) : 0;
}

int64_t SequenceKv::release_outside_window() {
  if (!books_ || spec_.window <= 0) return 0;
  // Block b holds positions [b·bt, (b+1)·bt); none is read again once (b+1)·bt <= window_start(): a query at
  // p >= n_tokens() reads keys p - W < j <= p. The released blocks are always the first entries of the table.
  const int64_t dead = std::min(window_start() / layout_.block_tokens, static_cast<int64_t>(pages_.table.size()));
  int64_t n = 0;
  for (; pages_.released < dead; ++pages_.released, ++n) {
    int32_t& id = pages_.table[static_cast<size_t>(pages_.released)];
    books_->release(id);
    id = KvPages::kReleased;
  }
  return n;
}

int64_t kv_blocks_bound(int64_t tokens, int64_t block_tokens, int64_t window, int64_t max_chunk) {
  const int64_t all = (tokens + block_tokens - 1) / block_tokens;
  if (window <= 0) return all;
  return std::min(all, (window - 1 + std::max<int64_t>(1, max_chunk) + block_tokens - 1) / block_tokens + 1);
}

bool SequenceKv::reserve(int64_t n) {
  if (n > spec_.max_tokens) return false;
  if (!books_) return true;
  const auto need = static_cast<size_t>(blocks_for(n));
  while (pages_.table.size() < need) {
    const int32_t id = books_->allocate();
    if (id < 0) return false;
    pages_.table.push_back(id);
  }
  return true;
}

void SequenceKv::truncate(int64_t n) {
  TORCH_CHECK(n >= 0 && n <= n_tokens_, "SequenceKv::truncate(", n, ") with ", n_tokens_, " tokens");
  if (books_) {
    const auto keep = static_cast<size_t>(blocks_for(n));
    if (n % layout_.block_tokens != 0) {  // the block holding position n will be written again
      const int32_t id = pages_.table[keep - 1];
      TORCH_CHECK(id != KvPages::kReleased && books_->ref_count(id) == 1 && !books_->published(id),
                  "SequenceKv::truncate(", n, "): position ", n,
                  " lies in a block shared through the prefix cache or released by the sliding window");
    }
    // The next query (at n) reads [from, n): those rows must still be held (nothing to hold when n = 0).
    const int64_t from = spec_.window > 0 ? std::max<int64_t>(0, n - spec_.window + 1) : 0;
    TORCH_CHECK(from == n || pages_.holds_from(from), "SequenceKv::truncate(", n,
                "): the sliding window would read positions from ", from, ", and the blocks below ",
                pages_.released_below(), " were released");
    drop_blocks_from(keep);
    if (hashes_.size() > static_cast<size_t>(n / layout_.block_tokens))
      hashes_.resize(static_cast<size_t>(n / layout_.block_tokens));
    n_adopted_ = std::min(n_adopted_, n);
  }
  n_tokens_ = n;
}

void SequenceKv::reset() {
  if (books_) drop_blocks_from(0);  // each held block released once; released entries are skipped
  n_tokens_ = 0;
  n_adopted_ = 0;
  hashes_.clear();
}

int64_t SequenceKv::adopt_prefix(const int32_t* tokens, int64_t max_tokens) {
  TORCH_CHECK(books_ && n_tokens_ == 0 && pages_.table.empty(), "SequenceKv::adopt_prefix: not a fresh paged sequence");
  const int64_t bt = layout_.block_tokens;
  max_tokens = std::min(max_tokens, spec_.max_tokens);
  for (int64_t b = 0; (b + 1) * bt <= max_tokens; ++b) {
    const uint64_t parent = b > 0 ? hashes_.back() : 0;
    const uint64_t h = kv_block_hash(parent, salt_, tokens + b * bt, bt);
    const int32_t id = books_->lookup(h, parent, salt_, tokens + b * bt, bt);
    if (id < 0) break;
    pages_.table.push_back(id);
    hashes_.push_back(h);
  }
  n_tokens_ = static_cast<int64_t>(pages_.table.size()) * bt;
  n_adopted_ = n_tokens_;
  release_outside_window();  // the blocks the window no longer needs go back (they stay cached, published)
  return n_tokens_;
}

void SequenceKv::publish_full_blocks(const int32_t* tokens) {
  if (!books_) return;
  const int64_t bt = layout_.block_tokens;
  for (auto b = static_cast<int64_t>(hashes_.size()); (b + 1) * bt <= n_tokens_; ++b) {
    const uint64_t parent = b > 0 ? hashes_.back() : 0;
    const uint64_t h = kv_block_hash(parent, salt_, tokens + b * bt, bt);
    const int32_t id = pages_.table[static_cast<size_t>(b)];
    if (id != KvPages::kReleased) books_->publish(id, h, parent, salt_, tokens + b * bt, bt);
    hashes_.push_back(h);
  }
}

int64_t SequenceKv::bytes_per_token() const { return layout_.bytes_per_token(); }

}  // namespace frost
