// KV events (core/kv/kv_events.h): KvBlockBooks tells its observer exactly when the set of blocks lookup()
// can find changes — publish, eviction, clear_cache — and nothing else (release, retain, a lost publish
// race); KvEventBuffer coalesces chains like vLLM's BlockStored; snapshot() reports the whole set parents
// first. The end-to-end check against a real frostd is tests/client/kv_events_test.py.
#include "core/kv/kv_events.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/kv/block_books.h"

namespace frost {
namespace {

constexpr uint64_t kSalt = 7;

std::vector<int32_t> block_tokens(int32_t first, int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(first + static_cast<int32_t>(i));
  return t;
}

// An observer that keeps the raw calls, and the index a subscriber would build from them.
class Recorder final : public KvEventObserver {
 public:
  void on_block_stored(uint64_t hash, uint64_t parent, const int32_t* tokens, int64_t n) override {
    log.push_back("stored");
    index[hash] = {parent, std::vector<int32_t>(tokens, tokens + n)};
  }
  void on_block_removed(uint64_t hash) override {
    log.push_back("removed");
    EXPECT_EQ(index.erase(hash), 1u) << "removal of a hash that was never stored";
  }
  void on_all_cleared() override {
    log.push_back("cleared");
    index.clear();
  }
  std::vector<std::string> log;
  std::map<uint64_t, std::pair<uint64_t, std::vector<int32_t>>> index;
};

TEST(KvEventsTest, PublishEvictAndClearAreReportedAndNothingElse) {
  KvBlockBooks books(2, 64);
  Recorder rec;
  books.set_observer(&rec);
  const std::vector<int32_t> t0 = block_tokens(1, 4), t1 = block_tokens(5, 4);
  const uint64_t h0 = kv_block_hash(0, kSalt, t0.data(), 4), h1 = kv_block_hash(h0, kSalt, t1.data(), 4);

  const int32_t a = books.allocate(), b = books.allocate();
  EXPECT_TRUE(rec.log.empty()) << "allocating free blocks changes nothing findable";
  books.publish(a, h0, 0, kSalt, t0.data(), 4);
  books.publish(b, h1, h0, kSalt, t1.data(), 4);
  books.publish(b, h1, h0, kSalt, t1.data(), 4);  // already published: no-op
  ASSERT_EQ(rec.log, (std::vector<std::string>{"stored", "stored"}));
  EXPECT_EQ(rec.index.at(h1).first, h0);
  EXPECT_EQ(rec.index.at(h1).second, t1);

  // Release (preemption, cancellation, a finished request, a window): cached, still findable — no event.
  books.release(b);
  books.release(a);
  // lookup() retains a cached block again — no event either.
  const int32_t again = books.lookup(h0, 0, kSalt, t0.data(), 4);
  ASSERT_EQ(again, a);
  EXPECT_EQ(rec.log.size(), 2u);

  // Eviction: the pool is full (a held, b cached), so allocate() evicts b.
  const int32_t c = books.allocate();
  EXPECT_EQ(c, b);
  ASSERT_EQ(rec.log.size(), 3u);
  EXPECT_EQ(rec.log.back(), "removed");
  EXPECT_EQ(rec.index.count(h1), 0u);

  // A block losing the publish race to a block already published under that hash stays unpublished: silent.
  books.publish(c, h0, 0, kSalt, t0.data(), 4);
  EXPECT_FALSE(books.published(c));
  EXPECT_EQ(rec.log.size(), 3u);
  books.release(c);  // free, not cached
  EXPECT_EQ(rec.log.size(), 3u);

  // clear_cache() with a held published block (a): nothing cached to drop, a stays findable — no event.
  books.clear_cache();
  EXPECT_EQ(rec.log.size(), 3u);
  EXPECT_EQ(rec.index.size(), 1u);
  // Once a is cached too, clearing leaves nothing published: one all-cleared, no per-block removals.
  books.release(a);
  books.clear_cache();
  EXPECT_EQ(rec.log, (std::vector<std::string>{"stored", "stored", "removed", "cleared"}));
  EXPECT_TRUE(rec.index.empty());
}

TEST(KvEventsTest, ClearCacheWithHeldBlocksReportsEachDroppedBlock) {
  KvBlockBooks books(3, 64);
  Recorder rec;
  books.set_observer(&rec);
  std::vector<uint64_t> hashes;
  std::vector<int32_t> ids;
  uint64_t parent = 0;
  for (int i = 0; i < 3; ++i) {
    const std::vector<int32_t> t = block_tokens(10 * i, 2);
    const uint64_t h = kv_block_hash(parent, kSalt, t.data(), 2);
    ids.push_back(books.allocate());
    books.publish(ids.back(), h, parent, kSalt, t.data(), 2);
    hashes.push_back(h);
    parent = h;
  }
  books.release(ids[1]);
  books.release(ids[2]);
  books.clear_cache();  // ids[0] is still held: two removals, no all-cleared
  EXPECT_EQ(rec.log, (std::vector<std::string>{"stored", "stored", "stored", "removed", "removed"}));
  EXPECT_EQ(rec.index.size(), 1u);
  EXPECT_EQ(rec.index.count(hashes[0]), 1u);
}

TEST(KvEventsTest, BufferCoalescesChainsAndRemovals) {
  KvEventBuffer buf;
  const std::vector<int32_t> t = block_tokens(1, 8);
  buf.on_block_stored(11, 0, t.data(), 4);
  buf.on_block_stored(12, 11, t.data() + 4, 4);  // continues the chain
  buf.on_block_stored(21, 5, t.data(), 4);       // another parent: a new event
  buf.on_block_removed(11);
  buf.on_block_removed(12);
  buf.on_all_cleared();
  const std::vector<KvEvent> ev = buf.take();
  EXPECT_TRUE(buf.empty());
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(ev[0].hashes, (std::vector<uint64_t>{11, 12}));
  EXPECT_FALSE(ev[0].has_parent);
  EXPECT_EQ(ev[0].tokens, t);
  EXPECT_EQ(ev[0].block_size, 4);
  EXPECT_TRUE(ev[1].has_parent);
  EXPECT_EQ(ev[1].parent, 5u);
  EXPECT_EQ(ev[2].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(ev[2].hashes, (std::vector<uint64_t>{11, 12}));
  EXPECT_EQ(ev[3].kind, KvEvent::Kind::kAllCleared);
}

// Random traffic on a small pool: after every operation the index rebuilt from the events holds exactly the
// published blocks (hash → parent, tokens), and snapshot() rebuilds the same index with parents first.
TEST(KvEventsTest, EventsTrackThePublishedSetUnderRandomTraffic) {
  constexpr int64_t kBlocks = 6, kBt = 2;
  KvBlockBooks books(kBlocks, 64);
  Recorder rec;
  books.set_observer(&rec);
  std::mt19937 rng(53);
  // Each "sequence": a chain of blocks over a few token values, so prefixes repeat and publishes race.
  std::vector<std::vector<int32_t>> held;  // per live sequence, its block ids
  std::map<int32_t, uint64_t> hash_of;     // id → hash it was published under (when it was)
  std::map<int32_t, std::pair<uint64_t, std::vector<int32_t>>> content;
  for (int step = 0; step < 3000; ++step) {
    const int op = static_cast<int>(rng() % 3);
    if (op == 0 ||
        held.empty()) {  // a new sequence of 1..3 blocks: adopt what is cached, then allocate + publish
      std::vector<int32_t> ids;
      uint64_t parent = 0;
      const int n = 1 + static_cast<int>(rng() % 3);
      bool ok = true;
      for (int b = 0; b < n && ok; ++b) {
        std::vector<int32_t> t = {static_cast<int32_t>(rng() % 2), static_cast<int32_t>(b)};
        const uint64_t h = kv_block_hash(parent, kSalt, t.data(), kBt);
        int32_t id = books.lookup(h, parent, kSalt, t.data(), kBt);
        if (id < 0) {
          id = books.allocate();
          if (id < 0) {
            ok = false;
            break;
          }
          books.publish(id, h, parent, kSalt, t.data(), kBt);
          if (books.published(id)) content[id] = {parent, t};
        }
        if (books.published(id)) hash_of[id] = h;
        ids.push_back(id);
        parent = h;
      }
      if (!ok) {
        for (int32_t id : ids) books.release(id);
      } else {
        held.push_back(ids);
      }
    } else if (op == 1) {  // a sequence ends (finished, cancelled or preempted): its blocks are released
      const size_t i = rng() % held.size();
      for (int32_t id : held[i]) books.release(id);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (rng() % 50 == 0) {  // a cache clear, every other time with nothing held (all-cleared then)
      if (rng() % 2 == 0) {
        for (const std::vector<int32_t>& ids : held)
          for (int32_t id : ids) books.release(id);
        held.clear();
      }
      books.clear_cache();
    }
    std::map<uint64_t, std::pair<uint64_t, std::vector<int32_t>>> want;
    for (int32_t id = 0; id < kBlocks; ++id)
      if (books.published(id)) want[hash_of.at(id)] = content.at(id);
    ASSERT_EQ(rec.index, want) << "step " << step;
  }
  // The traffic did evict, clear and race (else the loop above proved little).
  EXPECT_GT(std::count(rec.log.begin(), rec.log.end(), "removed"), 100);
  EXPECT_GT(std::count(rec.log.begin(), rec.log.end(), "cleared"), 5);
  // The snapshot of the final state: all-cleared first, every published block once, each parent first.
  Recorder snap;
  books.snapshot(&snap);
  ASSERT_FALSE(snap.log.empty());
  EXPECT_EQ(snap.log.front(), "cleared");
  EXPECT_EQ(snap.index, rec.index);
  KvEventBuffer buf;
  books.snapshot(&buf);
  std::set<uint64_t> seen;
  for (const KvEvent& e : buf.take()) {
    if (e.kind != KvEvent::Kind::kStored) continue;
    if (e.has_parent && rec.index.count(e.parent)) {
      EXPECT_TRUE(seen.count(e.parent)) << "parent after child";
    }
    seen.insert(e.hashes.begin(), e.hashes.end());
  }
  EXPECT_EQ(seen.size(), rec.index.size());
}

}  // namespace
}  // namespace frost
