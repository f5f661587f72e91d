#pragma once
// SequenceKv: the KV cache of one sequence, all layers, preallocated to spec.max_tokens.
// Owned by whoever runs the sequence (the engine thread); not thread-safe.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/kv/block_books.h"
#include "core/kv/block_storage.h"
#include "core/kv/codec.h"
#include "core/kv/kv_pages.h"
#include "core/kv/kv_spec.h"

namespace frost {

class RepairSet;

class SequenceKv {
 public:
  // Standalone: one private block of spec.max_tokens positions, all writable from the start (the classic
  // preallocated cache; tests, jobs, the Generator and the bench use it).
  explicit SequenceKv(const KvSpec& spec);
  // Paged: blocks are taken in `books` (must outlive this) as the sequence grows (reserve()); `storage` (must
  // outlive this) holds their bytes and sets the layout (layout().block_tokens: how many positions of this
  // spec's codec a block holds). Host storage: the codecs read and write the blocks (layer(), reverse()).
  // Device storage (host_base() null): the sequence keeps only its block table and length, which the device's
  // executor reads; it has no codecs (layer() and reverse() must not be called: resident() says which).
  SequenceKv(const KvSpec& spec, KvBlockBooks* books, const KvBlockStorage* storage);
  ~SequenceKv();  // gives its blocks back
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  const KvSpec& spec() const { return spec_; }
  // True when the rows live in host memory this sequence's codecs read and write (standalone, or paged on
  // host storage); false on device storage.
  bool resident() const { return !layers_.empty(); }
  KvCodec& layer(int64_t i) { return *layers_[static_cast<size_t>(i)]; }
  const KvCodec& layer(int64_t i) const { return *layers_[static_cast<size_t>(i)]; }
  // Layer i's reverse store, a second codec of spec.codec whose K slot holds q rows (SBA layers,
  // spec.reverse_layers; core/model/variants.h); nullptr for other layers.
  KvCodec* reverse(int64_t i) { return reverse_.empty() ? nullptr : reverse_[static_cast<size_t>(i)].get(); }

  // Number of positions written so far (the next token's position).
  int64_t n_tokens() const { return n_tokens_; }
  // Positions that can be written now: spec.max_tokens standalone; paged, those of the blocks held.
  int64_t capacity() const;
  // Called by the model after all layers stored `n` more tokens.
  void advance(int64_t n) { n_tokens_ += n; }
  // Forget everything after the first `n` positions (n <= n_tokens()). Paged: blocks past position n go back
  // to the pool; truncating into a block shared with other sequences (a cached prefix) is refused, and so is
  // truncating to where the sliding window would need a block already released.
  void truncate(int64_t n);
  // n_tokens() = 0; paged: every block goes back to the pool.
  void reset();

  // ---- blocks (core/kv/kv_pages.h, core/kv/block_books.h) ----
  bool paged() const { return books_ != nullptr; }
  const KvLayout& layout() const { return layout_; }
  int64_t block_tokens() const { return layout_.block_tokens; }
  // Indexed by position / block_tokens(); the first n_released() entries are KvPages::kReleased (no block).
  const std::vector<int32_t>& block_table() const { return pages_.table; }
  int64_t n_released() const { return pages_.released; }
  // Blocks this sequence holds now (the table less the released entries).
  int64_t blocks_held() const { return pages_.blocks_held(); }
  // The first position any future query can read: n_tokens() - window + 1 for a sliding spec, else 0.
  int64_t window_start() const;
  // Sliding windows (spec.window > 0, paged only; core/kv/kv_pages.h): gives back to the pool every block wholly
  // below window_start() — no row of it is read again, by any layer — and marks its entry released. A published
  // block stays in the prefix cache (its content is final and immutable) until evicted. Returns how many it
  // released. Called by the scheduler after each step's commit and at admission; a no-op otherwise.
  int64_t release_outside_window();
  int64_t blocks_for(int64_t n) const { return (n + layout_.block_tokens - 1) / layout_.block_tokens; }
  // Makes positions [0, n) writable (n <= spec.max_tokens). Paged: takes the missing blocks from the pool;
  // false when it ran out (the blocks taken so far are kept). Standalone: true iff n <= spec.max_tokens.
  // Released entries are never taken again: positions only grow past them.
  bool reserve(int64_t n);

  // ---- prefix cache (paged) ----
  // What besides the tokens decides the rows (model, codec, repair operator, KVSplice version); set before
  // adopt_prefix() / publish_full_blocks().
  void set_prefix_salt(uint64_t salt) { salt_ = salt; }
  // For a sequence holding nothing yet: adopts the longest chain of published full blocks that match
  // tokens[0 .. max_tokens) from the start (shared, read-only). Returns the positions adopted, a multiple of
  // block_tokens(); n_tokens() is set to it. Sliding windows: the chain must be whole from block 0 (every
  // block a lookup hit, so a prefix with a missing block is never reused past the gap); the adopted blocks
  // the window no longer needs are then released at once (release_outside_window).
  int64_t adopt_prefix(const int32_t* tokens, int64_t max_tokens);
  // Publishes each full block below n_tokens() not yet published; tokens[0 .. n_tokens()) are the ids that
  // were written. A released entry is never published (its block may already belong to another sequence):
  // the hash chain goes on past it, and a later lookup of that chain misses there.
  void publish_full_blocks(const int32_t* tokens);
  int64_t n_adopted() const { return n_adopted_; }  // positions adopted from the cache at the last start

  // The repair operator R_phi of the KV pipeline (docs/kv_repair.md;
  // core/kv/repair.h), the one optional stage a served sequence runs: every path applies it to its repaired
  // layers (the fast paths in folded form). Null = off. Corruption, the repair form and the training taps are
  // not a serving sequence's: they are a KvStudy (core/kv/kv_study.h) passed to the reference forward().
  void set_repair(std::shared_ptr<const RepairSet> repair) { repair_ = std::move(repair); }
  const std::shared_ptr<const RepairSet>& repair() const { return repair_; }

  int64_t bytes_per_token() const;  // all layers, payload
  // Memory held: the blocks (standalone: its one block), padding included; released blocks are not held.
  int64_t bytes_allocated() const { return pages_.blocks_held() * layout_.block_bytes; }
  int64_t bytes_in_use() const { return bytes_per_token() * (n_tokens_ - std::min(n_tokens_, pages_.released_below())); }

 private:
  void make_codecs();
  void drop_blocks_from(size_t first);

  KvSpec spec_;
  KvBlockBooks* books_ = nullptr;  // paged; null = standalone
  at::Tensor own_;                 // standalone storage
  KvLayout layout_;
  KvPages pages_;
  std::vector<std::unique_ptr<KvCodec>> layers_;
  std::vector<std::unique_ptr<KvCodec>> reverse_;  // n_layer entries (null = none) or empty
  int64_t n_tokens_ = 0;
  uint64_t salt_ = 0;
  std::vector<uint64_t> hashes_;  // chain hash of each full block from the start (published or adopted)
  int64_t n_adopted_ = 0;
  std::shared_ptr<const RepairSet> repair_;
};

// The KvLayerFormat of every layer (and reverse store) of `spec` (core/kv/codec.h kv_layer_format).
void kv_spec_formats(const KvSpec& spec, std::vector<KvLayerFormat>* layers,
                     std::vector<KvLayerFormat>* reverse);
// Bytes of a pool block that holds block_tokens positions of `spec` stored as fp32, the widest codec: a pool
// made with it holds block_tokens positions per block at fp32 and more with any compact codec.
int64_t kv_pool_block_bytes(const KvSpec& spec, int64_t block_tokens);
// The layout a paged sequence of `spec` gets in blocks of block_bytes.
KvLayout kv_paged_layout(const KvSpec& spec, int64_t block_bytes);
// The most blocks a paged sequence of `tokens` positions in blocks of block_tokens ever holds at once, when it is
// fed at most max_chunk positions per step: every block of it, or with a sliding window W (spec.window) the
// blocks under its last W - 1 positions plus the chunk being written, ceil((W - 1 + max_chunk) / block_tokens) + 1
// (a span that does not start on a block boundary touches one block more).
int64_t kv_blocks_bound(int64_t tokens, int64_t block_tokens, int64_t window, int64_t max_chunk);

}  // namespace frost
