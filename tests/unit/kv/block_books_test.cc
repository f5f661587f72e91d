// KvBlockBooks: the books of the paged KV cache (used / cached / free, LRU eviction, prefix lookup), and the
// host storage's memory commitment (HostKvStorage, engine.kv_cache_prefault). The engine-level accounting under load is in
// tests/unit/generate/engine_batch_test.cc; this holds the pool's own contract.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/kv/block_books.h"
#include "core/kv/block_storage.h"

namespace frost {
namespace {

// Resident anonymous memory of this process in bytes (RssAnon of /proc/self/status); -1 when unknown.
int64_t rss_anon_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    long long kb = 0;
    if (std::sscanf(line.c_str(), "RssAnon: %lld kB", &kb) == 1) return kb * 1024;
  }
  return -1;
}

TEST(KvBlockBooksTest, BooksFollowAllocateReleasePublishAndEvict) {
  KvBlockBooks pool(3, 4096);
  const std::vector<int32_t> toks = {1, 2, 3, 4};
  const uint64_t h = kv_block_hash(0, 7, toks.data(), 4);

  const int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_GE(c, 0);
  EXPECT_EQ(pool.allocate(), -1) << "every block is used";
  EXPECT_EQ(pool.n_used(), 3);

  pool.publish(a, h, 0, 7, toks.data(), 4);
  pool.release(a);  // published → cached, still found by its tokens
  pool.release(b);  // unpublished → free
  KvPoolStats s = pool.stats();
  EXPECT_EQ(s.n_used, 1);
  EXPECT_EQ(s.n_cached, 1);
  EXPECT_EQ(s.n_free, 1);

  // A lookup must match parent, salt and tokens, not only the hash.
  const std::vector<int32_t> other = {1, 2, 3, 5};
  EXPECT_EQ(pool.lookup(h, 0, 7, other.data(), 4), -1);
  EXPECT_EQ(pool.lookup(h, 0, 8, toks.data(), 4), -1);
  EXPECT_EQ(pool.lookup(h, 0, 7, toks.data(), 4), a);
  EXPECT_EQ(pool.ref_count(a), 1);
  pool.release(a);

  // Free blocks go first; only then is the cached one evicted (and no longer found).
  const int32_t d = pool.allocate();
  EXPECT_EQ(d, b) << "the most recently freed block is reused first";
  EXPECT_EQ(pool.lookup(h, 0, 7, toks.data(), 4), a) << "a free block was available: nothing evicted";
  pool.release(a);
  const int32_t e = pool.allocate();
  EXPECT_EQ(e, a);
  EXPECT_EQ(pool.stats().n_evicted, 1u);
  EXPECT_FALSE(pool.published(a));
  EXPECT_EQ(pool.lookup(h, 0, 7, toks.data(), 4), -1);
  for (int32_t id : {c, d, e}) pool.release(id);
  s = pool.stats();
  EXPECT_EQ(s.n_used, 0);
  EXPECT_EQ(s.n_free, 3);
}

TEST(HostKvStorageTest, RefusesSizesItCannotHold) {
  EXPECT_EQ(HostKvStorage::create(0, 4096).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostKvStorage::create(4, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostKvStorage::create(int64_t{1} << 31, 4096).status().code(), absl::StatusCode::kInvalidArgument);
}

// engine.kv_cache_prefault: a prefaulted pool is resident (and reads as zero) before any block is written; a
// lazy one costs address space only.
TEST(HostKvStorageTest, PrefaultCommitsThePoolAtCreation) {
  if (rss_anon_bytes() < 0) GTEST_SKIP() << "no RssAnon in /proc/self/status";
  constexpr int64_t kBlocks = 256, kBlockBytes = 256 * 1024;  // 64 MiB
  const int64_t before_lazy = rss_anon_bytes();
  auto lazy = HostKvStorage::create(kBlocks, kBlockBytes, /*prefault=*/false);
  ASSERT_TRUE(lazy.ok()) << lazy.status();
  const int64_t lazy_growth = rss_anon_bytes() - before_lazy;
  EXPECT_LT(lazy_growth, kBlocks * kBlockBytes / 4) << "a lazy pool became resident at creation";

  const int64_t before = rss_anon_bytes();
  auto eager = HostKvStorage::create(kBlocks, kBlockBytes, /*prefault=*/true);
  ASSERT_TRUE(eager.ok()) << eager.status();
  const int64_t growth = rss_anon_bytes() - before;
  EXPECT_GE(growth, kBlocks * kBlockBytes * 9 / 10) << "the prefaulted pool is not resident: grew by " << growth;
  const uint8_t* base = (*eager)->host_base();
  int64_t nonzero = 0;
  for (int64_t off = 0; off < kBlocks * kBlockBytes; off += 4096) nonzero += base[off] != 0;
  EXPECT_EQ(nonzero, 0);
}

}  // namespace
}  // namespace frost
