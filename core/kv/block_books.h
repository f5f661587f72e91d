#pragma once
// KvBlockBooks: the books of a serving engine's KV memory — which of n_blocks fixed-size blocks are held by
// whom (reference counts), the prefix cache over them and its LRU (vLLM's BlockPool + KVCacheManager books;
// the scheduler in core/generate decides, this only keeps the books). The blocks' bytes live elsewhere, in a
// KvBlockStorage (core/kv/block_storage.h: host pages, or device pages only the device's executor touches),
// so preemption, prefix caching, cancellation and admission keep the same books on every device.
//
// A block is in one of three states:
//   used    ref_count > 0: held by one or more sequences (shared prefix blocks are held by several)
//   cached  ref_count == 0 and published: a full block whose content is known by its hash; kept for
//           reuse until the space is needed, then evicted least-recently-released first
//   free    ref_count == 0, not published
// allocate() takes a free block, else evicts the LRU cached one; it fails only when every block is used.
//
// Prefix cache. A full block's content is a pure function of the tokens up to its end and of everything
// that changes the numbers written (the model, the KV codec, the repair operator, the KVSplice version, the
// layout): the caller folds that into a `salt`, and block_hash() chains parent hash, salt and the block's
// tokens (a sequence's i-th block hash covers tokens [0, (i+1)·block_tokens)). publish() records a block
// under its hash once its last position is written; lookup() finds it again for a later sequence. A
// lookup compares the stored parent hash, salt and tokens too, so a 64-bit hash collision can never hand
// out a wrong block. Published blocks are immutable: sequences only write positions past the blocks they
// adopted.
//
// KV events (core/kv/kv_events.h): an observer, when set, hears every change of what lookup() can find — a
// block published, a published block evicted or dropped, the cache cleared — and nothing else.
//
// Not thread-safe: the engine thread owns the pool (stats() copies are taken there).
#include <cstdint>
#include <memory>
#include <vector>

#include <string>

#include "absl/container/flat_hash_map.h"
#include "core/kv/kv_events.h"

namespace frost {

// The chained hash of one full block (see above). parent = 0 for the first block.
uint64_t kv_block_hash(uint64_t parent, uint64_t salt, const int32_t* tokens, int64_t n);
// Mixes a string into a salt (the prefix-cache key parts: model, codec, repair, splice).
uint64_t kv_salt_mix(uint64_t salt, const std::string& part);

struct KvPoolStats {
  int64_t n_blocks = 0, block_bytes = 0;
  int64_t n_used = 0;    // ref_count > 0
  int64_t n_cached = 0;  // ref_count == 0, published (reusable by hash, evictable)
  int64_t n_free = 0;    // neither
  uint64_t n_evicted = 0;
};

class KvBlockBooks {
 public:
  // Books for n_blocks blocks (1 .. 2^30, checked by KvBlockStorage's makers) of block_bytes bytes each (the
  // storage's; the books only report it).
  KvBlockBooks(int64_t n_blocks, int64_t block_bytes);
  KvBlockBooks(const KvBlockBooks&) = delete;
  KvBlockBooks& operator=(const KvBlockBooks&) = delete;

  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_bytes() const { return block_bytes_; }
  // Blocks allocate() can hand out now (free + cached).
  int64_t n_available() const { return static_cast<int64_t>(free_.size()) + n_cached_; }
  int64_t n_used() const { return n_blocks_ - n_available(); }
  KvPoolStats stats() const;

  // A block with ref_count 1, or -1 when every block is used. May evict a cached block (unpublishes it).
  int32_t allocate();
  void retain(int32_t id);
  // ref_count - 1; at 0 a published block becomes cached (most recently used), an unpublished one free.
  void release(int32_t id);
  int32_t ref_count(int32_t id) const { return meta_[static_cast<size_t>(id)].refs; }

  // The published block holding exactly these tokens after `parent` under `salt`, retained for the caller;
  // -1 when none.
  int32_t lookup(uint64_t hash, uint64_t parent, uint64_t salt, const int32_t* tokens, int64_t n);
  // Records used block `id` as holding these tokens (its last position is written). A block already
  // published under that hash wins: `id` then stays unpublished (freed when released). No-op for an id that
  // is already published.
  void publish(int32_t id, uint64_t hash, uint64_t parent, uint64_t salt, const int32_t* tokens, int64_t n);
  bool published(int32_t id) const { return meta_[static_cast<size_t>(id)].published; }
  // Drops every cached block (free again); used blocks are untouched (and stay published). Events: the
  // dropped blocks' removal, or all-cleared when no published block is left.
  void clear_cache();

  // Hears every later change of the published set (null: none). Must outlive the books or be reset.
  void set_observer(KvEventObserver* observer) { observer_ = observer; }
  // Reports the whole published set to `out` as if from empty: all-cleared, then every published block,
  // each parent before its children where the parent is published too (a child whose parent was evicted
  // keeps its parent hash: lookup() cannot reach it, and neither can an index walking from the root).
  void snapshot(KvEventObserver* out) const;

 private:
  struct Meta {
    int32_t refs = 0;
    bool published = false;
    uint64_t hash = 0, parent = 0, salt = 0;
    std::vector<int32_t> tokens;
    int32_t prev = -1, next = -1;  // LRU list of cached blocks
  };
  void lru_push_back(int32_t id);
  void lru_remove(int32_t id);
  void unpublish(int32_t id);

  int64_t n_blocks_, block_bytes_;
  std::vector<Meta> meta_;
  std::vector<int32_t> free_;  // stack: the most recently freed block is reused first (warm in cache)
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int64_t n_cached_ = 0;
  uint64_t n_evicted_ = 0;
  absl::flat_hash_map<uint64_t, int32_t> by_hash_;
  KvEventObserver* observer_ = nullptr;
};

}  // namespace frost
