#include "core/kv/kv_events.h"

#include <utility>

namespace frost {

void KvEventBuffer::on_block_stored(uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t n) {
  // A sequence publishes its full blocks in order (core/kv/sequence_kv.cc, publish_full_blocks), so a chain
  // usually arrives block by block: one event per chain, like vLLM's (several block_hashes, one parent).
  if (!events_.empty()) {
    KvEvent& last = events_.back();
    if (last.kind == KvEvent::Kind::kStored && last.hashes.back() == parent && last.block_size == n) {
      last.hashes.push_back(hash);
      last.tokens.insert(last.tokens.end(), tokens, tokens + n);
      return;
    }
  }
  KvEvent e;
  e.kind = KvEvent::Kind::kStored;
  e.hashes.push_back(hash);
  // kv_block_hash() chains from parent 0 (core/kv/block_books.h): 0 means "first block of a sequence".
  e.has_parent = parent != 0;
  e.parent = parent;
  e.tokens.assign(tokens, tokens + n);
  e.block_size = static_cast<int32_t>(n);
  events_.push_back(std::move(e));
}

void KvEventBuffer::on_block_removed(uint64_t hash) {
  if (!events_.empty() && events_.back().kind == KvEvent::Kind::kRemoved) {
    events_.back().hashes.push_back(hash);
    return;
  }
  KvEvent e;
  e.kind = KvEvent::Kind::kRemoved;
  e.hashes.push_back(hash);
  events_.push_back(std::move(e));
}

void KvEventBuffer::on_all_cleared() {
  // Everything before it in this batch is moot for a subscriber that applies the batch in order, but keeping
  // the events costs nothing and keeps the stream a faithful log.
  KvEvent e;
  e.kind = KvEvent::Kind::kAllCleared;
  events_.push_back(std::move(e));
}

std::vector<KvEvent> KvEventBuffer::take() {
  std::vector<KvEvent> out;
  out.swap(events_);
  return out;
}

}  // namespace frost
