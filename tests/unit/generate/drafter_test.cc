#include "core/generate/drafter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

namespace frost {
namespace {

using Tokens = std::vector<int32_t>;

constexpr int32_t kVocab = 1000;

PromptLookupOptions lookup_options(int min_n = 1, int max_n = 3) {
  PromptLookupOptions o;
  o.min_ngram = min_n;
  o.max_ngram = max_n;
  o.vocab_size = kVocab;
  return o;
}

SuffixOptions suffix_options(int depth = 32) {
  SuffixOptions o;
  o.max_depth = depth;
  o.max_match = depth;
  o.vocab_size = kVocab;
  return o;
}

Tokens propose(Drafter& d, const Tokens& seq, int k) {
  Tokens out;
  d.propose(seq, k, &out);
  return out;
}

Tokens concat(std::initializer_list<Tokens> parts) {
  Tokens r;
  for (const Tokens& p : parts) r.insert(r.end(), p.begin(), p.end());
  return r;
}

Tokens random_tokens(std::mt19937& rng, size_t n, int32_t vocab) {
  Tokens r(n);
  for (int32_t& t : r) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return r;
}

// ---- prompt lookup ----

TEST(PromptLookupTest, ProposesTheContinuationOfARepeatedPhrase) {
  PromptLookupDrafter d(lookup_options());
  // "the quick brown fox jumps over the lazy dog . the quick brown" → "fox jumps over ..."
  const Tokens seq = {10, 11, 12, 13, 14, 15, 10, 16, 17, 18, 10, 11, 12};
  EXPECT_EQ(propose(d, seq, 4), (Tokens{13, 14, 15, 10}));
}

TEST(PromptLookupTest, PrefersTheLongestNgramThenTheMostRecentOccurrence) {
  PromptLookupDrafter d(lookup_options());
  // Last 3 tokens 1 2 3 occur once, followed by 7; "3" alone occurs later followed by 9.
  const Tokens seq = {1, 2, 3, 7, 5, 3, 9, 4, 3, 8, 1, 2, 3};
  EXPECT_EQ(propose(d, seq, 1), (Tokens{7}));
  // Only the unigram matches: the most recent earlier "3" was followed by 8.
  PromptLookupDrafter e(lookup_options());
  EXPECT_EQ(propose(e, {1, 3, 9, 4, 3, 8, 6, 3}, 2), (Tokens{8, 6}));
}

TEST(PromptLookupTest, NothingOnAFreshSequence) {
  PromptLookupDrafter d(lookup_options());
  EXPECT_TRUE(propose(d, {}, 4).empty());
  EXPECT_TRUE(propose(d, {5}, 4).empty());
  EXPECT_TRUE(propose(d, {5, 6, 7, 8, 9}, 4).empty());
  PromptLookupDrafter bigrams(lookup_options(2, 3));
  EXPECT_TRUE(propose(bigrams, {5, 6, 5, 7}, 4).empty());  // only a unigram repeats
}

TEST(PromptLookupTest, RespectsK) {
  PromptLookupDrafter d(lookup_options());
  const Tokens seq = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2};
  EXPECT_TRUE(propose(d, seq, 0).empty());
  for (int k = 1; k <= 6; ++k) {
    const Tokens out = propose(d, seq, k);
    ASSERT_EQ(out.size(), static_cast<size_t>(k));
    EXPECT_EQ(out, Tokens(seq.begin() + 2, seq.begin() + 2 + k));
  }
  // Appends: earlier contents of *out stay.
  Tokens out = {42};
  d.propose(seq, 2, &out);
  EXPECT_EQ(out, (Tokens{42, 3, 4}));
}

TEST(PromptLookupTest, LoopsContinuePeriodically) {
  PromptLookupDrafter d(lookup_options());
  EXPECT_EQ(propose(d, {7, 1, 2, 3, 1, 2, 3}, 7), (Tokens{1, 2, 3, 1, 2, 3, 1}));
  PromptLookupDrafter e(lookup_options());
  EXPECT_EQ(propose(e, {4, 4, 4}, 3), (Tokens{4, 4, 4}));
}

TEST(PromptLookupTest, NeverProposesOutOfRangeIds) {
  PromptLookupOptions o = lookup_options();
  o.vocab_size = 100;
  PromptLookupDrafter d(o);
  EXPECT_EQ(propose(d, {1, 2, 3, 150, 4, 1, 2}, 4), (Tokens{3}));
  PromptLookupDrafter e(o);
  EXPECT_TRUE(propose(e, {1, -5, 3, 1}, 4).empty());
}

// Index after appends then rollback == index that never saw them (proposals compared for every k, n).
template <typename MakeDrafter>
void check_rollback_is_exact(MakeDrafter make) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const Tokens seq = random_tokens(rng, 200 + trial * 5, 6);  // small vocab: many matches
    auto inc = make();
    size_t len = 0;
    for (int step = 0; step < 120; ++step) {
      // Grow by 1..12, or roll back by 1..8 (explicitly or through a shorter `tokens`).
      const int op = static_cast<int>(rng() % 3);
      if (op == 0 && len > 0) {
        len -= std::min<size_t>(len, 1 + rng() % 8);
        inc->truncate(len);
      } else if (op == 1 && len > 0) {
        len -= std::min<size_t>(len, 1 + rng() % 8);
      } else {
        len = std::min(seq.size(), len + 1 + rng() % 12);
      }
      const Tokens prefix(seq.begin(), seq.begin() + len);
      const int k = 1 + static_cast<int>(rng() % 8);
      auto fresh = make();
      ASSERT_EQ(propose(*inc, prefix, k), propose(*fresh, prefix, k))
          << "trial " << trial << " step " << step;
    }
  }
}

TEST(PromptLookupTest, RollbackLeavesItAsIfNeverAppended) {
  check_rollback_is_exact([] { return std::make_unique<PromptLookupDrafter>(lookup_options()); });
  // A same-length rewrite through truncate(), and one the guard catches (last token differs).
  PromptLookupDrafter d(lookup_options());
  propose(d, {1, 2, 3, 9, 1, 2}, 2);
  d.truncate(3);
  EXPECT_EQ(propose(d, {1, 2, 3, 8, 1, 2}, 2), (Tokens{3, 8}));
  EXPECT_EQ(propose(d, {1, 2, 3, 8, 1, 5}, 2), Tokens{});
}

TEST(PromptLookupTest, Deterministic) {
  std::mt19937 rng(3);
  const Tokens seq = random_tokens(rng, 2000, 20);
  PromptLookupDrafter a(lookup_options()), b(lookup_options());
  for (size_t len = 1; len <= seq.size(); len += 37) {
    const Tokens prefix(seq.begin(), seq.begin() + len);
    ASSERT_EQ(propose(a, prefix, 5), propose(b, prefix, 5));
  }
}

// ---- suffix decoding ----

TEST(SuffixDrafterTest, ProposesFromItsOwnSequence) {
  SuffixDrafter d(suffix_options(), nullptr);
  const Tokens phrase = {20, 21, 22, 23, 24, 25, 26, 27};
  const Tokens seq = concat({{1, 2}, phrase, {3, 4}, {20, 21, 22, 23}});
  // Matched 4 tokens: at most 4 proposed (max_spec_factor 1).
  EXPECT_EQ(propose(d, seq, 8), (Tokens{24, 25, 26, 27}));
  EXPECT_EQ(propose(d, seq, 2), (Tokens{24, 25}));
  EXPECT_TRUE(propose(d, seq, 0).empty());
  SuffixDrafter fresh(suffix_options(), nullptr);
  EXPECT_TRUE(propose(fresh, {1, 2, 3, 4, 5}, 4).empty());
}

TEST(SuffixDrafterTest, ProposesTextSeenInAnotherRequestsOutput) {
  SuffixCache cache(32, 1 << 16);
  const Tokens answer = {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111};
  cache.insert(concat({{5, 6}, answer, {7}}));
  SuffixDrafter d(suffix_options(), &cache);
  // A new request whose output starts the same answer: the cache continues it.
  const Tokens seq = concat({{50, 51, 52}, {100, 101, 102, 103, 104, 105}});
  EXPECT_EQ(propose(d, seq, 5), (Tokens{106, 107, 108, 109, 110}));
  SuffixDrafter own_only(suffix_options(), nullptr);
  EXPECT_TRUE(propose(own_only, seq, 5).empty());
}

// A sequence copying a text longer than the trie's depth matches at the depth cap; the match must leave room
// for k tokens (suffix_match_cap), or every step drafts one token (what depth 16 and k 4 did before).
TEST(SuffixDrafterTest, ACopyLongerThanTheDepthStillDraftsKTokens) {
  constexpr int kDepth = 16, kK = 4;
  std::mt19937 rng(7);
  const Tokens story = random_tokens(rng, 80, kVocab);
  SuffixCache cache(kDepth, 1 << 16);
  cache.insert(story);
  SuffixDrafter own(suffix_options(kDepth), nullptr);
  SuffixDrafter shared(suffix_options(kDepth), &cache);
  for (size_t copied = kDepth + 4; copied + kK < story.size(); copied += 7) {
    // Own: the story in the prompt, then copied again; shared: only the copy, the story is another output.
    const Tokens seq = concat({story, {1}, Tokens(story.begin(), story.begin() + static_cast<long>(copied))});
    const Tokens next(story.begin() + static_cast<long>(copied),
                      story.begin() + static_cast<long>(copied) + kK);
    EXPECT_EQ(propose(own, seq, kK), next) << copied;
    const Tokens copy(story.begin(), story.begin() + static_cast<long>(copied));
    EXPECT_EQ(propose(shared, copy, kK), next) << copied;
  }
  EXPECT_EQ(suffix_match_cap(16, 4), 12);
  EXPECT_EQ(suffix_match_cap(4, 8), 1);
}

TEST(SuffixDrafterTest, FollowsTheMostFrequentContinuationAndStopsBelowMinProb) {
  SuffixCache cache(16, 1 << 16);
  // After 1 2 3: 4 5 6 three times, 9 once → 4 (p .75), 5, 6.
  for (int i = 0; i < 3; ++i) cache.insert({1, 2, 3, 4, 5, 6});
  cache.insert({1, 2, 3, 9, 9, 9});
  SuffixDrafter d(suffix_options(16), &cache);
  EXPECT_EQ(propose(d, {0, 1, 2, 3}, 3), (Tokens{4, 5, 6}));
  // After 8: 10 different continuations, each p = 0.1 < 0.2.
  SuffixOptions strict = suffix_options(16);
  strict.min_prob = 0.2;
  SuffixCache fan(16, 1 << 16);
  for (int32_t t = 0; t < 10; ++t) fan.insert({3, 8, 200 + t});
  SuffixDrafter s(strict, &fan);
  EXPECT_TRUE(propose(s, {3, 8}, 3).empty());
  // Ties between continuations → the lower id.
  SuffixCache tie(16, 1 << 16);
  tie.insert({3, 8, 301});
  tie.insert({3, 8, 300});
  SuffixDrafter t(suffix_options(16), &tie);
  EXPECT_EQ(propose(t, {3, 8}, 1), (Tokens{300}));
}

TEST(SuffixDrafterTest, NeverProposesOutOfRangeIds) {
  SuffixOptions o = suffix_options();
  o.vocab_size = 100;
  SuffixCache cache(32, 1 << 16);
  cache.insert({1, 2, 3, 4, 150, 5});
  SuffixDrafter d(o, &cache);
  EXPECT_EQ(propose(d, {9, 1, 2, 3}, 3), (Tokens{4}));
}

TEST(SuffixDrafterTest, RollbackLeavesItAsIfNeverAppended) {
  check_rollback_is_exact([] { return std::make_unique<SuffixDrafter>(suffix_options(8), nullptr); });
  // Same memory too: every node freed.
  std::mt19937 rng(11);
  const Tokens seq = random_tokens(rng, 500, 5);
  SuffixDrafter d(suffix_options(8), nullptr), e(suffix_options(8), nullptr);
  propose(d, Tokens(seq.begin(), seq.begin() + 300), 1);
  propose(d, seq, 1);
  d.truncate(300);
  propose(e, Tokens(seq.begin(), seq.begin() + 300), 1);
  EXPECT_EQ(d.nodes(), e.nodes());
  d.truncate(0);
  EXPECT_EQ(d.nodes(), 0u);
}

TEST(SuffixCacheTest, BudgetEvictsTheOldestRequests) {
  SuffixCache cache(16, 30);
  const Tokens a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const Tokens b = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  const Tokens c = {21, 22, 23, 24, 25, 26, 27, 28, 29, 30};
  cache.insert(a);
  cache.insert(b);
  cache.insert(c);
  EXPECT_EQ(cache.tokens(), 30u);
  SuffixDrafter d(suffix_options(16), &cache);
  EXPECT_EQ(propose(d, {1, 2, 3}, 2), (Tokens{4, 5}));
  cache.insert({31, 32, 33, 34, 35});  // a goes, b and c stay
  EXPECT_EQ(cache.requests(), 3u);
  EXPECT_EQ(cache.tokens(), 25u);
  SuffixDrafter e(suffix_options(16), &cache);
  EXPECT_TRUE(propose(e, {1, 2, 3}, 2).empty());
  SuffixDrafter f(suffix_options(16), &cache);
  EXPECT_EQ(propose(f, {11, 12, 13}, 2), (Tokens{14, 15}));
  // Longer than the budget: keeps its last 30 tokens, everything else evicted; the trie is exactly that
  // text's.
  Tokens big;
  for (int32_t t = 0; t < 45; ++t) big.push_back(500 + t);
  cache.insert(big);
  EXPECT_EQ(cache.requests(), 1u);
  EXPECT_EQ(cache.tokens(), 30u);
  SuffixCache only(16, 30);
  only.insert(Tokens(big.end() - 30, big.end()));
  EXPECT_EQ(cache.nodes(), only.nodes());
}

TEST(SuffixCacheTest, EvictionRemovesEveryNode) {
  std::mt19937 rng(5);
  SuffixCache cache(12, 400);
  for (int i = 0; i < 50; ++i) cache.insert(random_tokens(rng, 20 + rng() % 100, 8));
  EXPECT_LE(cache.tokens(), 400u);
  cache.insert(random_tokens(rng, 400, 8));  // evicts all the others
  EXPECT_EQ(cache.requests(), 1u);
  // Equal to a cache that saw only the last one: compare node counts and proposals.
  std::mt19937 again(5);
  Tokens last;
  {
    for (int i = 0; i < 50; ++i) random_tokens(again, 20 + again() % 100, 8);
    last = random_tokens(again, 400, 8);
  }
  SuffixCache only(12, 400);
  only.insert(last);
  EXPECT_EQ(cache.nodes(), only.nodes());
  SuffixOptions o = suffix_options(12);
  o.min_prob = 0.0;
  for (int i = 0; i < 50; ++i) {
    const Tokens q = random_tokens(rng, 6, 8);
    Tokens x, y;
    cache.propose(q, 6, o, &x);
    only.propose(q, 6, o, &y);
    ASSERT_EQ(x, y);
  }
}

TEST(SuffixCacheTest, ConcurrentProposeWhileInserting) {
  SuffixCache cache(32, 20000);
  cache.insert({100, 101, 102, 103, 104, 105, 106, 107, 108, 109});
  std::atomic<int> writers_left{2};
  std::atomic<int> proposals{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(1 + w);
      for (int i = 0; i < 100; ++i) cache.insert(random_tokens(rng, 50 + rng() % 400, 50));
      --writers_left;
    });
  }
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 rng(100 + r);
      SuffixDrafter d(suffix_options(), &cache);
      Tokens seq = random_tokens(rng, 20, 50);
      while (writers_left > 0) {
        Tokens out;
        d.propose(seq, 5, &out);
        for (int32_t t : out) ASSERT_TRUE(t >= 0 && t < 50);
        seq.push_back(out.empty() ? static_cast<int32_t>(rng() % 50) : out[0]);
        if (seq.size() > 400) seq.resize(10);  // a rollback, seen through a shorter `tokens`
        ++proposals;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(proposals.load(), 0);
  EXPECT_LE(cache.tokens(), 20000u);
  // Interleaved inserts and evictions left nothing behind: one request of the whole budget evicts the rest.
  std::mt19937 rng(77);
  const Tokens big = random_tokens(rng, 20000, 50);
  cache.insert(big);
  SuffixCache only(32, 20000);
  only.insert(big);
  EXPECT_EQ(cache.requests(), 1u);
  EXPECT_EQ(cache.nodes(), only.nodes());
}

TEST(SuffixDrafterTest, Deterministic) {
  std::mt19937 rng(9);
  SuffixCache cache(32, 1 << 16);
  for (int i = 0; i < 20; ++i) cache.insert(random_tokens(rng, 100, 30));
  const Tokens seq = random_tokens(rng, 1500, 30);
  SuffixDrafter a(suffix_options(), &cache), b(suffix_options(), &cache);
  for (size_t len = 1; len <= seq.size(); len += 23) {
    const Tokens prefix(seq.begin(), seq.begin() + len);
    ASSERT_EQ(propose(a, prefix, 6), propose(b, prefix, 6));
  }
}

// ---- benchmark (printed, not asserted) ----

// A 4k-token sequence of "text with reuse": phrases drawn from a small set, random filler between them.
Tokens reuse_text(std::mt19937& rng, size_t n) {
  std::vector<Tokens> phrases;
  for (int i = 0; i < 40; ++i) phrases.push_back(random_tokens(rng, 8 + rng() % 24, kVocab));
  Tokens r;
  while (r.size() < n) {
    if (rng() % 2) {
      const Tokens& p = phrases[rng() % phrases.size()];
      r.insert(r.end(), p.begin(), p.end());
    } else {
      for (int i = 0; i < 5; ++i) r.push_back(static_cast<int32_t>(rng() % kVocab));
    }
  }
  r.resize(n);
  return r;
}

// The trie's match with a guess (what a drafter passes the shared cache: its last match length plus the
// tokens since) finds the same node and length as the plain binary search, whatever the guess.
TEST(SuffixTrieTest, MatchWithAGuessIsTheMatchWithout) {
  std::mt19937 rng(17);
  SuffixTrie trie(16);
  for (int r = 0; r < 12; ++r) {
    std::vector<int32_t> active;
    for (int32_t t : reuse_text(rng, 300)) trie.append(&active, t);
  }
  for (int i = 0; i < 400; ++i) {
    const Tokens text = reuse_text(rng, 40 + rng() % 200);
    int len = -1;
    const int32_t node = trie.match(text, 15, &len);
    for (int guess = -1; guess <= 17; ++guess) {
      int glen = -1;
      ASSERT_EQ(trie.match(text, 15, &glen, guess), node) << "guess " << guess;
      ASSERT_EQ(glen, len) << "guess " << guess;
    }
  }
}

// A drafter stepped token by token (its shared-cache guesses in play) proposes what a fresh drafter given the
// same prefix at once (no guess) proposes.
TEST(SuffixDrafterTest, SteppedProposalsEqualAFreshDrafters) {
  std::mt19937 rng(23);
  SuffixCache cache(16, 1 << 16);
  for (int i = 0; i < 16; ++i) cache.insert(reuse_text(rng, 200));
  const Tokens seq = reuse_text(rng, 600);
  SuffixDrafter stepped(suffix_options(16), &cache);
  for (size_t len = 1; len <= seq.size(); ++len) {
    const Tokens prefix(seq.begin(), seq.begin() + len);
    const Tokens got = propose(stepped, prefix, 5);
    if (len % 7 != 0) continue;
    SuffixDrafter fresh(suffix_options(16), &cache);
    ASSERT_EQ(got, propose(fresh, prefix, 5)) << "at " << len;
  }
}

template <typename D>
void bench(const char* name, D& d, const Tokens& seq, size_t warm) {
  // Feed the first `warm` tokens, then step: append one token, propose k = 5 (what a decode step does).
  Tokens out;
  d.propose(absl::MakeConstSpan(seq).first(warm), 5, &out);
  size_t proposed = 0, steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t len = warm + 1; len <= seq.size(); ++len, ++steps) {
    out.clear();
    d.propose(absl::MakeConstSpan(seq).first(len), 5, &out);
    proposed += out.size();
  }
  // And repeated proposals on the full 4k sequence (no append).
  const auto t1 = std::chrono::steady_clock::now();
  const int reps = 20000;
  for (int i = 0; i < reps; ++i) {
    out.clear();
    d.propose(seq, 5, &out);
  }
  const auto t2 = std::chrono::steady_clock::now();
  const double step_s = std::chrono::duration<double>(t1 - t0).count();
  const double prop_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf(
      "[bench] %-13s %zu-token sequence: %.0f steps/s (append + propose k=5, %.2f tokens proposed per "
      "step), %.0f proposals/s at 4k tokens\n",
      name, seq.size(), steps / step_s, static_cast<double>(proposed) / steps, reps / prop_s);
}

TEST(DrafterBenchTest, ProposalsPerSecondAt4kTokens) {
  std::mt19937 rng(2026);
  const Tokens seq = reuse_text(rng, 4096);
  PromptLookupDrafter lookup(lookup_options());
  bench("prompt_lookup", lookup, seq, 1024);
  SuffixCache cache(32, 1 << 16);
  std::vector<Tokens> outputs;
  for (int i = 0; i < 48; ++i) outputs.push_back(reuse_text(rng, 4096));
  const auto t0 = std::chrono::steady_clock::now();
  for (const Tokens& o : outputs) cache.insert(o);  // the last 32 evict one request each
  const double insert_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[bench] SuffixCache insert of a 4096-token output (with eviction past 16): %.2f ms\n",
              insert_s * 1e3 / outputs.size());
  SuffixDrafter suffix(suffix_options(), &cache);
  bench("suffix", suffix, seq, 1024);
  std::printf(
      "[bench] suffix trie (D = 32): own %.1f nodes, %.0f bytes per token; shared cache %.1f nodes, %.0f "
      "bytes per token (%zu tokens, %.1f MB)\n",
      static_cast<double>(suffix.nodes()) / seq.size(), static_cast<double>(suffix.bytes()) / seq.size(),
      static_cast<double>(cache.nodes()) / cache.tokens(),
      static_cast<double>(cache.bytes()) / cache.tokens(), cache.tokens(), cache.bytes() / 1e6);
}

}  // namespace
}  // namespace frost
