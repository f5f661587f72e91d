#pragma once
// KV events: the prefix cache's block life cycle as a stream of events, for an indexer outside the process
// (llm-d's KV-cache indexer behind the inference gateway's endpoint picker, issue 53). The books
// (core/kv/block_books.h) report three things to a KvEventObserver, on the engine thread, as they happen:
//
//   stored     a block became findable by its hash (KvBlockBooks::publish() recorded it): its hash, its
//              parent's hash (the previous block of the same sequence; none for a sequence's first block)
//              and its tokens. Nothing else makes a block findable.
//   removed    a findable block stopped being findable: evicted from the LRU to be reused (allocate()), or
//              dropped by clear_cache(). Nothing else unpublishes a block.
//   cleared    nothing is findable any more (clear_cache() left no published block).
//
// Preemption, cancellation, a finished request and a sliding window's released blocks only release
// references: a published block stays findable (cached) until it is evicted, so those emit nothing. A block
// whose hash is already published (another sequence computed the same prefix first) is never published
// itself, so it emits nothing either. The events therefore describe exactly the set of hashes lookup() can
// find, no more and no less (tests/unit/kv/kv_events_test.cc checks that against the books).
//
// The observer runs inside the books' mutations on the engine thread: it must only append to memory.
// KvEventBuffer does that, coalescing a chain of stored blocks into one event the way vLLM's BlockStored
// carries several (vllm/distributed/kv_events.py); the engine hands the buffer's events to a KvEventSink
// once per round (core/generate/engine.cc, end_round), and the sink — server/kv_events_publisher.h, the
// ZeroMQ publisher — encodes and sends them on its own thread.
//
// Hashes are frost's kv_block_hash() values (uint64, chained, salted with the model, codec, repair operator
// and KVSplice: core/kv/block_books.h). An indexer cannot recompute them from tokens; it keys a block by its
// token ids and its parent chain, and uses the hashes only to link a block to its parent and to apply
// removals (docs/kv-events.md).
#include <cstdint>
#include <vector>

namespace frost {

struct KvEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kAllCleared };
  Kind kind = Kind::kAllCleared;
  // kStored: the blocks in chain order (each one's parent is the previous one; the first one's is `parent`).
  // kRemoved: the blocks no longer findable, in the order they went.
  std::vector<uint64_t> hashes;
  bool has_parent = false;  // kStored: false when the first block starts a sequence
  uint64_t parent = 0;
  std::vector<int32_t> tokens;  // kStored: block_size tokens per hash, concatenated
  int32_t block_size = 0;       // kStored: tokens per block
};

// Called by KvBlockBooks inside its mutations (engine thread). Must only record; must not call the books.
class KvEventObserver {
 public:
  virtual ~KvEventObserver() = default;
  // Block `hash` holding tokens[0, n) after `parent` (0: the sequence's first block) is findable now.
  virtual void on_block_stored(uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t n) = 0;
  virtual void on_block_removed(uint64_t hash) = 0;
  virtual void on_all_cleared() = 0;
};

// The engine's observer: events in memory until take(). A stored block whose parent is the last stored block
// of the previous event (and of the same size) extends that event, as does a removal following a removal.
// Not thread-safe (engine thread).
class KvEventBuffer final : public KvEventObserver {
 public:
  void on_block_stored(uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t n) override;
  void on_block_removed(uint64_t hash) override;
  void on_all_cleared() override;
  bool empty() const { return events_.empty(); }
  void clear() { events_.clear(); }
  std::vector<KvEvent> take();

 private:
  std::vector<KvEvent> events_;
};

// Where the engine sends each round's events (EngineConfig::kv_events). Called on the engine thread.
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  // One batch, in order. Must not block: a sink that cannot keep up drops the batch (and counts it).
  virtual void publish(std::vector<KvEvent> events) = 0;
  // True once after the sink dropped a batch and can take one again: the engine then sends a snapshot of
  // the whole prefix cache (AllBlocksCleared, then every findable block: KvBlockBooks::snapshot) instead of
  // the round's events, so that a subscriber's index is whole again after the gap.
  virtual bool take_snapshot_request() { return false; }
};

}  // namespace frost
