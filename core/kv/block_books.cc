#include "core/kv/block_books.h"

#include <cstring>
#include <string>

#include "core/common/check.h"

namespace frost {
namespace {

// splitmix64 finaliser: a strong 64-bit mix (the chain only needs distinct inputs to spread; lookups
// verify the tokens, so collisions cost a miss, never a wrong block).
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t kv_block_hash(uint64_t parent, uint64_t salt, const int32_t* tokens, int64_t n) {
  uint64_t h = mix(parent ^ mix(salt));
  for (int64_t i = 0; i < n; ++i) h = mix(h ^ static_cast<uint32_t>(tokens[i]));
  return mix(h ^ static_cast<uint64_t>(n));
}

uint64_t kv_salt_mix(uint64_t salt, const std::string& part) {
  uint64_t h = mix(salt ^ part.size());
  for (unsigned char c : part) h = mix(h ^ c);
  return h;
}

KvBlockBooks::KvBlockBooks(int64_t n_blocks, int64_t block_bytes)
    : n_blocks_(n_blocks), block_bytes_(block_bytes), meta_(static_cast<size_t>(n_blocks)) {
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));  // block 0 first
}

KvPoolStats KvBlockBooks::stats() const {
  KvPoolStats s;
  s.n_blocks = n_blocks_;
  s.block_bytes = block_bytes_;
  s.n_cached = n_cached_;
  s.n_free = static_cast<int64_t>(free_.size());
  s.n_used = n_blocks_ - s.n_cached - s.n_free;
  s.n_evicted = n_evicted_;
  return s;
}

void KvBlockBooks::lru_push_back(int32_t id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  m.prev = lru_tail_;
  m.next = -1;
  if (lru_tail_ >= 0) meta_[static_cast<size_t>(lru_tail_)].next = id;
  lru_tail_ = id;
  if (lru_head_ < 0) lru_head_ = id;
  ++n_cached_;
}

void KvBlockBooks::lru_remove(int32_t id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  if (m.prev >= 0) meta_[static_cast<size_t>(m.prev)].next = m.next;
  else lru_head_ = m.next;
  if (m.next >= 0) meta_[static_cast<size_t>(m.next)].prev = m.prev;
  else lru_tail_ = m.prev;
  m.prev = m.next = -1;
  --n_cached_;
}

void KvBlockBooks::unpublish(int32_t id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  if (!m.published) return;
  auto it = by_hash_.find(m.hash);
  if (it != by_hash_.end() && it->second == id) by_hash_.erase(it);
  m.published = false;
  m.tokens.clear();
}

int32_t KvBlockBooks::allocate() {
  int32_t id = -1;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {  // evict the least recently released cached block
    id = lru_head_;
    lru_remove(id);
    if (observer_) observer_->on_block_removed(meta_[static_cast<size_t>(id)].hash);
    unpublish(id);
    ++n_evicted_;
  } else {
    return -1;
  }
  Meta& m = meta_[static_cast<size_t>(id)];
  FROST_DCHECK(m.refs == 0);
  m.refs = 1;
  return id;
}

void KvBlockBooks::retain(int32_t id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  if (m.refs == 0) {
    FROST_CHECK(m.published, "KvBlockBooks::retain of a free block");
    lru_remove(id);
  }
  ++m.refs;
}

void KvBlockBooks::release(int32_t id) {
  Meta& m = meta_[static_cast<size_t>(id)];
  FROST_CHECK(m.refs > 0, "KvBlockBooks::release of a block with no reference (double free)");
  if (--m.refs > 0) return;
  if (m.published) {
    lru_push_back(id);
  } else {
    free_.push_back(id);
  }
}

int32_t KvBlockBooks::lookup(uint64_t hash, uint64_t parent, uint64_t salt, const int32_t* tokens, int64_t n) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const int32_t id = it->second;
  const Meta& m = meta_[static_cast<size_t>(id)];
  if (m.parent != parent || m.salt != salt || static_cast<int64_t>(m.tokens.size()) != n ||
      std::memcmp(m.tokens.data(), tokens, static_cast<size_t>(n) * sizeof(int32_t)) != 0)
    return -1;
  retain(id);
  return id;
}

void KvBlockBooks::publish(int32_t id, uint64_t hash, uint64_t parent, uint64_t salt, const int32_t* tokens,
                          int64_t n) {
  Meta& m = meta_[static_cast<size_t>(id)];
  FROST_CHECK(m.refs > 0, "KvBlockBooks::publish of a block nobody holds");
  if (m.published || by_hash_.contains(hash)) return;
  m.published = true;
  m.hash = hash;
  m.parent = parent;
  m.salt = salt;
  m.tokens.assign(tokens, tokens + n);
  by_hash_.emplace(hash, id);
  if (observer_) observer_->on_block_stored(hash, parent, tokens, n);
}

void KvBlockBooks::clear_cache() {
  while (lru_head_ >= 0) {
    const int32_t id = lru_head_;
    lru_remove(id);
    // Removals are only reported when something stays published (held blocks): else one all-cleared says it.
    if (observer_ && by_hash_.size() > static_cast<size_t>(n_cached_) + 1)
      observer_->on_block_removed(meta_[static_cast<size_t>(id)].hash);
    unpublish(id);
    free_.push_back(id);
  }
  if (observer_ && by_hash_.empty()) observer_->on_all_cleared();
}

void KvBlockBooks::snapshot(KvEventObserver* out) const {
  out->on_all_cleared();
  // Roots first: a block whose parent is not published (a sequence's first block, or an evicted parent's
  // child), then depth-first down the children, so that every reported parent precedes its children.
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> children;
  std::vector<int32_t> stack;
  for (const auto& [hash, id] : by_hash_) {
    const Meta& m = meta_[static_cast<size_t>(id)];
    if (m.parent != 0 && by_hash_.contains(m.parent))
      children[m.parent].push_back(id);
    else
      stack.push_back(id);
  }
  while (!stack.empty()) {
    const int32_t id = stack.back();
    stack.pop_back();
    const Meta& m = meta_[static_cast<size_t>(id)];
    out->on_block_stored(m.hash, m.parent, m.tokens.data(), static_cast<int64_t>(m.tokens.size()));
    if (auto it = children.find(m.hash); it != children.end())
      stack.insert(stack.end(), it->second.begin(), it->second.end());
  }
}

}  // namespace frost
