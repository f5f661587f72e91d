// Sliding windows in the paged KV cache (SequenceKv::release_outside_window, KvSpec::window): the blocks
// wholly below a sequence's window go back to the pool exactly once, the table keeps its indexing with the
// released entries marked, every reader refuses a released row (the reference reads from 0, the codecs'
// full-range kernels) while the window's span reads and kernels give the same numbers as an unreleased twin,
// and the prefix cache never publishes or hands out a released entry. The engine-level behaviour (outputs,
// admission, preemption, usage) is in tests/unit/generate/engine_window_test.cc.
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/kv/block_books.h"
#include "core/kv/block_storage.h"
#include "core/kv/sequence_kv.h"

namespace frost {
namespace {

constexpr int64_t kBlockTokens = 4, kWindow = 6, kHkv = 2, kD = 8;

KvSpec spec_of(int64_t window, KvCodecKind codec = KvCodecKind::kF32) {
  KvSpec s;
  s.n_layer = 2;
  s.n_head_kv = kHkv;
  s.head_dim = kD;
  s.max_tokens = 256;
  s.codec = codec;
  s.window = window;
  return s;
}

// A pool whose blocks hold kBlockTokens positions at fp32 (more with the compact codecs).
struct Pool {
  explicit Pool(int64_t n_blocks)
      : storage(std::move(
            HostKvStorage::create(n_blocks, kv_pool_block_bytes(spec_of(0), kBlockTokens)).value())),
        books(n_blocks, storage->block_bytes()) {}
  std::unique_ptr<HostKvStorage> storage;
  KvBlockBooks books;
};

// Writes positions [kv.n_tokens(), n) of every layer with values that depend on (layer, position), the way
// the model does (reserve, append, advance), releasing after each token as the scheduler's commit does.
void grow(SequenceKv& kv, int64_t n, bool release) {
  std::vector<float> k(kHkv * kD), v(kHkv * kD);
  while (kv.n_tokens() < n) {
    const int64_t p = kv.n_tokens();
    ASSERT_TRUE(kv.reserve(p + 1));
    for (int64_t l = 0; l < kv.spec().n_layer; ++l) {
      for (int64_t i = 0; i < kHkv * kD; ++i) {
        k[static_cast<size_t>(i)] = std::sin(0.1f * static_cast<float>(p * 31 + i + 7 * l));
        v[static_cast<size_t>(i)] = std::cos(0.2f * static_cast<float>(p * 17 + i + 3 * l));
      }
      kv.layer(l).append_token(k.data(), v.data(), p);
    }
    kv.advance(1);
    if (release) kv.release_outside_window();
  }
}

TEST(SlidingKvTest, ReleasesBlocksBelowTheWindowOnceAndKeepsTheIndexing) {
  Pool pool(64);
  SequenceKv kv(spec_of(kWindow), &pool.books, pool.storage.get());
  for (int64_t n = 1; n <= 40; ++n) {
    grow(kv, n, true);
    // A query at p >= n reads n - W < j: blocks wholly at or below n - W are gone, no more.
    const int64_t first_live = std::max<int64_t>(0, n - kWindow + 1);
    EXPECT_EQ(kv.window_start(), first_live);
    EXPECT_EQ(kv.n_released(), first_live / kBlockTokens) << "at " << n;
    EXPECT_EQ(static_cast<int64_t>(kv.block_table().size()), (n + kBlockTokens - 1) / kBlockTokens);
    // Held: at most ceil((W - 1 + 1) / bt) + 1 blocks while decoding one token a step.
    EXPECT_LE(kv.blocks_held(), kv_blocks_bound(n, kBlockTokens, kWindow, 1)) << "at " << n;
    EXPECT_EQ(pool.books.n_used(), kv.blocks_held());
    for (int64_t b = 0; b < static_cast<int64_t>(kv.block_table().size()); ++b)
      EXPECT_EQ(kv.block_table()[static_cast<size_t>(b)] == KvPages::kReleased, b < kv.n_released());
  }
  EXPECT_EQ(kv.blocks_held(), 2);  // window_start 35: blocks 8 and 9 held, 0..7 released, table of 10
  EXPECT_EQ(kv.bytes_allocated(), kv.blocks_held() * pool.storage->block_bytes());
  // A truncate that would need a released block is refused; the books are untouched.
  EXPECT_THROW(kv.truncate(20), c10::Error);
  kv.truncate(38);  // the window of a query at 38 starts at 33: still held
  EXPECT_EQ(kv.blocks_held(), 2);
  kv.truncate(0);  // nothing left to read: every held block goes back, the released entries with the table
  EXPECT_EQ(pool.books.n_used(), 0);
  EXPECT_EQ(kv.n_released(), 0);
  grow(kv, 12, true);
  EXPECT_EQ(kv.n_released(), 1);
  kv.reset();  // every held block released once (a double free would FROST_CHECK)
  EXPECT_EQ(pool.books.n_used(), 0);
  EXPECT_EQ(kv.n_released(), 0);
}

TEST(SlidingKvTest, WindowReadersMatchAnUnreleasedTwinAndFullReadersRefuse) {
  for (KvCodecKind codec : {KvCodecKind::kF32, KvCodecKind::kF16, KvCodecKind::kInt8, KvCodecKind::kInt4}) {
    Pool pool(64);
    SequenceKv slid(spec_of(kWindow, codec), &pool.books, pool.storage.get());
    SequenceKv kept(spec_of(0, codec), &pool.books, pool.storage.get());  // the same rows, nothing released
    grow(slid, 23, true);
    grow(kept, 23, false);
    ASSERT_GT(slid.n_released(), 0);
    const int64_t n = 23, start = slid.window_start();
    for (int64_t l = 0; l < 2; ++l) {
      EXPECT_TRUE(at::equal(slid.layer(l).keys_span(start, n), kept.layer(l).keys_span(start, n)));
      EXPECT_TRUE(at::equal(slid.layer(l).values_span(start, n), kept.layer(l).values_span(start, n)));
      // The reference path's read from 0 and the full-range kernels refuse; they never touch a released
      // entry.
      EXPECT_THROW(slid.layer(l).keys(n), c10::Error);
      EXPECT_THROW(slid.layer(l).values_span(slid.n_released() * slid.block_tokens() - 1, n), c10::Error);
      std::vector<float> q(4 * kD), a(4 * kD), b(4 * kD);
      for (size_t i = 0; i < q.size(); ++i) q[i] = std::cos(0.3f * static_cast<float>(i));
      EXPECT_THROW(slid.layer(l).attend(q.data(), 4, n, 0.35f, 0, 4, a.data()), c10::Error);
      // The window kernel over [n - W, n) equals the twin's, bit for bit (it reads only the span).
      slid.layer(l).attend_window(q.data(), 4, n - kWindow, n, 0.35f, 0.f, 0, 4, a.data());
      kept.layer(l).attend_window(q.data(), 4, n - kWindow, n, 0.35f, 0.f, 0, 4, b.data());
      EXPECT_EQ(a, b) << kv_codec_name(codec);
      // KvCodec's default span kernel (the decoded rows; KVSplice's path) also reads only the span.
      slid.layer(l).KvCodec::attend_window(q.data(), 4, n - kWindow, n, 0.35f, 0.f, 0, 4, a.data());
      kept.layer(l).KvCodec::attend_window(q.data(), 4, n - kWindow, n, 0.35f, 0.f, 0, 4, b.data());
      EXPECT_EQ(a, b) << kv_codec_name(codec);
    }
  }
}

TEST(SlidingKvTest, PrefixCacheNeverPublishesOrAdoptsAReleasedEntry) {
  const int64_t bt = kBlockTokens;
  std::vector<int32_t> toks;
  for (int32_t i = 0; i < 64; ++i) toks.push_back(5 + (i * 7) % 50);
  {  // Released before publishing (prefix caching was off while it ran): nothing of it can be found later.
    Pool pool(64);
    SequenceKv a(spec_of(kWindow), &pool.books, pool.storage.get());
    a.set_prefix_salt(9);
    grow(a, 24, true);
    ASSERT_GT(a.n_released(), 0);
    a.publish_full_blocks(toks.data());  // publishes only the held full blocks, the chain hashed through
    SequenceKv b(spec_of(kWindow), &pool.books, pool.storage.get());
    b.set_prefix_salt(9);
    EXPECT_EQ(b.adopt_prefix(toks.data(), 23), 0)
        << "block 0 was released unpublished: the chain breaks there";
    b.reset();
    a.reset();
    EXPECT_EQ(pool.books.n_used(), 0);
  }
  {  // Published, then released: the blocks stay cached (content final) and a later sequence adopts the whole
     // chain, then gives back at once what its own window does not need.
    Pool pool(8);
    SequenceKv a(spec_of(kWindow), &pool.books, pool.storage.get());
    a.set_prefix_salt(9);
    for (int64_t p = 0; p < 24; ++p) {
      grow(a, p + 1, false);
      a.publish_full_blocks(toks.data());
      a.release_outside_window();
    }
    EXPECT_EQ(a.n_released(), 4);  // window_start 19: blocks 0..3 released (published: cached), 4 and 5 held
    EXPECT_EQ(a.blocks_held(), 2);
    SequenceKv b(spec_of(kWindow), &pool.books, pool.storage.get());
    b.set_prefix_salt(9);
    EXPECT_EQ(b.adopt_prefix(toks.data(), 23), 20);  // 5 full blocks below the last token
    EXPECT_EQ(b.n_released(), 3);  // its window starts at 15: blocks 0..2 given back at once
    EXPECT_EQ(b.blocks_held(), 2);
    EXPECT_EQ(b.block_table()[4], a.block_table()[4]);  // shared, read-only
    EXPECT_EQ(pool.books.n_used(), 3);                  // a: 4, 5; b: 3, 4
    b.reset();
    // Block 0 evicted (the least recently released): the chain breaks at block 0, so nothing is adopted even
    // though blocks 1..4 are still there — never a prefix with a missing block.
    std::vector<int32_t> taken;
    for (int i = 0; i < 3; ++i) taken.push_back(pool.books.allocate());
    EXPECT_EQ(pool.books.stats().n_evicted, 1u);
    SequenceKv c(spec_of(kWindow), &pool.books, pool.storage.get());
    c.set_prefix_salt(9);
    EXPECT_EQ(c.adopt_prefix(toks.data(), 23), 0);
    for (int32_t id : taken) pool.books.release(id);
    a.reset();
    EXPECT_EQ(pool.books.n_used(), 0);
  }
}

}  // namespace
}  // namespace frost
