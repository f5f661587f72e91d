#pragma once
// Drafters for speculative decoding without a second model (issue 52): each proposes up to k next tokens for
// one sequence per decode step; the engine verifies them in the batched step and keeps the accepted prefix.
// A drafter only guesses: a wrong proposal costs verification rows, never a wrong output.
//
// State. One Drafter per sequence (like Sampler), owned by the thread that decodes it, not thread-safe. It
// keeps its own copy of the tokens it has indexed (prompt + accepted output; never its own drafts) and an
// index updated incrementally, so a step costs O(pattern + k), never O(sequence length):
//   - propose(tokens) first syncs: tokens past the indexed length are appended to the index one by one;
//     a shorter `tokens` rolls the index back to tokens.size() (the engine removed tokens);
//   - truncate(n) rolls back explicitly: use it when tokens are removed and others appended before the next
//     propose (the drafter cannot see a same-length rewrite). As a guard, propose compares the last indexed
//     token with tokens[indexed - 1] and, when they differ, finds the first difference (O(n), only on a
//     broken contract) and rolls back to it.
//   - rollback undoes appends exactly: the index after append(X) then truncate is the index that never saw X
//     (same proposals, same memory), so acceptance and rejection leave no trace.
// Both drafters are deterministic (same calls → same proposals; the shared cache adds its insertion history,
// and whether an insertion held it at the moment, as inputs) and never propose an id outside [0, vocab_size):
// a walk stops at the first such token.
//
// PromptLookupDrafter — n-gram prompt lookup (vLLM `ngram`, llama.cpp lookup). For n from max_ngram down to
// min_ngram: the most recent earlier occurrence of the sequence's last n tokens; proposes the k tokens that
// followed it. When the occurrence ends less than k tokens before the end (a loop "abcabc"), the proposal
// continues periodically (token j = token j - period of the proposal itself), which is what a repeating
// sequence does next. Index: one hash map (64-bit hash of (n, n-gram) → last end position) plus, per position
// and n, the previous end position of the same n-gram (a chain, which makes rollback exact and resolves hash
// collisions: a candidate is compared token by token; up to 16 links are followed). Append and rollback:
// O(max_ngram²) per token; propose: O(max_ngram² + k). Memory per sequence: 4 bytes per token (copy) + 4 ×
// (max_ngram - min_ngram + 1) per token (chains) + one map entry (~20 bytes) per distinct n-gram ≤ 4 + 4m +
// 20m bytes per token (m = number of n values; ~80 bytes per token for 1..3).
//
// SuffixDrafter — suffix decoding (SuffixDecoding, Oliaro et al. 2024; Arctic Inference / vLLM `suffix`).
// A SuffixTrie holds every substring of length ≤ D (max_depth) of its texts, with counts (how many times each
// occurs). Each sequence has its own trie over prompt + output; a SuffixCache (shared by all sequences of one
// model, thread-safe) holds one trie over the outputs of recently finished requests. Proposal, per trie:
//   1. match: the longest suffix of the sequence (length ≤ max_match and ≤ D - k, which leaves the walk room
//      for k tokens) that occurs in the trie with a continuation; the sequence's own trie keeps the nodes of
//      its current suffixes (one per depth),
//      so this is a scan of ≤ D nodes; the shared trie is searched by binary search on the length (an
//      occurring string's suffixes occur too), O(D log D) hash lookups;
//   2. walk: from the match, follow the most frequent child (ties → lower id) while the path probability
//      Π count(child) / Σ count(children) stays ≥ min_prob, for at most min(k, max_spec_factor × match +
//      max_spec_offset) tokens (Arctic's defaults: 0.1, 1.0, 0), and at most to depth D.
// The proposal with the higher score (Σ path probabilities = expected accepted tokens) wins; ties → the
// sequence's own. Costs: append or rollback O(D) per token (D child updates; a count decrement that demotes a
// node's most frequent child rescans that node's children); propose O(D log D + k). Each node keeps its most
// frequent child up to date, so walks are O(1) per token.
// Memory: a trie has at most D nodes per token it holds (a fresh substring per depth), ~64 bytes each
// (32-byte node + edge-map slot, with the containers' slack; bytes() reports it): per sequence ≤ 64·D bytes
// per token (2 KB at D = 32; the benchmark in tests/unit/generate/drafter_test.cc measures 24.5 nodes, 1.6 KB
// per token on text with 50% reuse, so a 4k-token sequence holds ~6.4 MB); the shared cache ≤
// 64·D·budget_tokens bytes (budget 65,536 tokens at D = 32: ≤ 134 MB, ~100 MB measured), plus the requests'
// tokens (4 bytes each). It evicts whole requests, oldest first, until a new one fits; a request longer than
// the budget keeps its last budget_tokens tokens.
//
// SuffixCache locking: propose tries a reader lock for its match and walk (~0.1 µs measured) and, when an
// inserter holds the writer lock, proposes nothing from the shared trie rather than wait (the engine thread
// never waits on the delivery thread's indexing; so a proposal also depends on timing, not only on the
// insertion history — a draft is only a guess). insert costs O(D) per inserted and per evicted token,
// memory-bound (~4 µs per token each at D = 32 on a 100 MB cache: 33 ms for a 4k-token output that evicts
// one); inserters are serialised and take the writer lock one chunk of 32 tokens at a time (~0.1 ms). Between
// chunks readers see a request partly inserted or partly evicted: the trie of a prefix of it, still a valid
// trie.
//
// Choices, in short: one drafter object per sequence rather than a stateless drafter plus a separate
// DrafterState (the engine already keeps one Sampler per sequence; this is the same lifetime); the drafter's
// own token copy (4 bytes per token) so that rollback can rehash and re-walk removed tokens without the
// caller's help; prompt lookup takes the most recent occurrence (llama.cpp) and continues loops
// periodically; suffix decoding follows Arctic's single-path greedy walk (the engine verifies one chain, not
// a tree), its cumulative-probability stop and spec-factor cap, and caches outputs only (prompts are in each
// sequence's own trie); ties always break by lower token id so that proposals do not depend on the order
// counts were reached in; the shared cache evicts whole requests so that its trie is always exactly the
// trie of the requests it lists (tested). A SuffixCache serves one model (ids are the model's); its depth
// bounds the match there whatever SuffixOptions::max_depth says.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace frost {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // tokens: the sequence so far (prompt + accepted output). Appends up to k proposed next tokens to *out
  // (none: no proposal; k <= 0 only syncs).
  virtual void propose(absl::Span<const int32_t> tokens, int k, std::vector<int32_t>* out) = 0;
  // The sequence is now its first n tokens (no-op when n >= the indexed length).
  virtual void truncate(size_t n) = 0;
};

// The sync protocol above, shared by the drafters: subclasses index one token at a time.
class IndexedDrafter : public Drafter {
 public:
  void propose(absl::Span<const int32_t> tokens, int k, std::vector<int32_t>* out) final;
  void truncate(size_t n) final;
  size_t indexed() const { return seq_.size(); }

 protected:
  virtual void on_append() = 0;  // seq_.back() was just appended
  virtual void on_reserve(size_t /*tokens*/) {}  // the sequence is about to hold this many tokens
  virtual void on_pop() = 0;     // seq_.back() is about to be removed
  virtual void draft(int k, std::vector<int32_t>* out) = 0;
  std::vector<int32_t> seq_;
};

struct PromptLookupOptions {
  int min_ngram = 1;
  int max_ngram = 3;
  int32_t vocab_size = 0;  // > 0
};

class PromptLookupDrafter : public IndexedDrafter {
 public:
  explicit PromptLookupDrafter(const PromptLookupOptions& options);

 private:
  void on_append() override;
  void on_pop() override;
  void draft(int k, std::vector<int32_t>* out) override;
  uint64_t hash(int n, size_t end) const;  // of (n, seq_[end - n, end))
  bool same(int n, size_t a, size_t b) const;

  PromptLookupOptions opt_;
  int m_;                                        // max_ngram - min_ngram + 1
  absl::flat_hash_map<uint64_t, int32_t> last_;  // hash(n, n-gram) → last end position
  std::vector<int32_t> prev_;  // [end * m_ + (n - min_ngram)]: previous end of the same n-gram, -1 none
};

// Every substring of length ≤ max_depth of the texts added, with occurrence counts (see the header comment).
// Not thread-safe. A caller appends a text token by token through an `active` vector (active[d - 1] = the
// node of the text's suffix of depth d), and removes it the same way from the end.
class SuffixTrie {
 public:
  explicit SuffixTrie(int max_depth);

  int max_depth() const { return max_depth_; }
  size_t nodes() const { return nodes_.size() - free_.size() - 1; }  // root excluded
  size_t bytes() const;  // memory held (node pool, free list, edge map)

  // Room for `tokens` more tokens of fresh text (up to max_depth nodes each) without regrowing the tables.
  void reserve(size_t tokens);
  // The text whose suffix nodes are *active gets `token` appended.
  void append(std::vector<int32_t>* active, int32_t token);
  // Removes the last token of `text` (whose suffix nodes are *active); `text` is the whole text up to and
  // including that token.
  void pop(std::vector<int32_t>* active, absl::Span<const int32_t> text);
  // The active vector of a text already added: the nodes of its suffixes (O(D²)).
  void suffix_nodes(absl::Span<const int32_t> text, std::vector<int32_t>* active) const;

  // The node of `path` from the root, or -1.
  int32_t find(absl::Span<const int32_t> path) const;
  // Whether the node has a continuation.
  bool continues(int32_t node) const { return nodes_[node].cont > 0; }
  // The longest suffix of `text` of length ≤ max_len that occurs with a continuation; its node, -1 none.
  // `guess` (optional): a length to test first, e.g. the last match's length plus the tokens since; the
  // answer is the same, found with fewer lookups when the guess is close (a match that keeps going).
  int32_t match(absl::Span<const int32_t> text, int max_len, int* len, int guess = -1) const;
  // The greedy walk from `node` (see the header comment); appends to *out, returns the score.
  double walk(int32_t node, int max_tokens, double min_prob, int32_t vocab_size,
              std::vector<int32_t>* out) const;

 private:
  struct Node {
    int32_t parent = -1;
    int32_t token = -1;
    int32_t count = 0;   // occurrences of the node's string
    int32_t cont = 0;    // Σ count of children: occurrences with a continuation
    int32_t best = -1;   // most frequent child (ties → lower token); not kept for the root
    int32_t first = -1;  // children: a doubly linked list
    int32_t prev = -1;
    int32_t next = -1;
  };
  static uint64_t key(int32_t parent, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(token);
  }
  bool better(int32_t a, int32_t b) const;  // a is a more frequent child than b
  int32_t add(int32_t parent, int32_t token);
  void remove_one(int32_t node);
  void rescan_best(int32_t node);

  int max_depth_;
  std::vector<Node> nodes_;  // [0] = root
  std::vector<int32_t> free_;
  absl::flat_hash_map<uint64_t, int32_t> edges_;  // key(parent, token) → child
};

struct SuffixOptions {
  int max_depth = 32;            // D: longest substring indexed (match + proposal)
  int max_match = 32;            // longest suffix matched (capped at D - k: suffix_match_cap)
  double min_prob = 0.1;         // stop when the path probability falls below
  double max_spec_factor = 1.0;  // at most max_spec_factor × match length + max_spec_offset tokens
  double max_spec_offset = 0.0;
  int32_t vocab_size = 0;  // > 0
};

// Outputs of recently finished requests of one model, shared by the sequences' SuffixDrafters. Thread-safe.
class SuffixCache {
 public:
  SuffixCache(int max_depth, size_t budget_tokens);

  // A finished request's output; evicts the oldest requests until it fits.
  void insert(absl::Span<const int32_t> output);
  // The best proposal from the cache for the sequence `text` (appended to *out); returns its score.
  // *match_len (optional): in, a guess at the match length (SuffixTrie::match); out, the length matched.
  double propose(absl::Span<const int32_t> text, int k, const SuffixOptions& opt, std::vector<int32_t>* out,
                 int* match_len = nullptr) const;

  size_t tokens() const;    // tokens held
  size_t requests() const;  // requests held
  size_t nodes() const;     // trie nodes
  size_t bytes() const;     // memory held: trie and the requests' tokens

 private:
  static constexpr size_t kChunk = 32;  // tokens inserted or evicted per writer lock
  void evict_oldest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(insert_mu_) ABSL_LOCKS_EXCLUDED(mu_);

  const size_t budget_;
  absl::Mutex insert_mu_;  // one inserter at a time; taken before mu_
  mutable absl::Mutex mu_;
  SuffixTrie trie_ ABSL_GUARDED_BY(mu_);
  std::deque<std::vector<int32_t>> held_ ABSL_GUARDED_BY(mu_);  // oldest first
  size_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
};

class SuffixDrafter : public IndexedDrafter {
 public:
  // `shared` may be null (own sequence only); it must outlive the drafter.
  SuffixDrafter(const SuffixOptions& options, const SuffixCache* shared);

  size_t nodes() const { return trie_.nodes(); }
  size_t bytes() const { return trie_.bytes() + seq_.capacity() * sizeof(int32_t); }

 private:
  void on_append() override;
  void on_pop() override;
  void on_reserve(size_t tokens) override;
  void draft(int k, std::vector<int32_t>* out) override;

  SuffixOptions opt_;
  const SuffixCache* shared_;
  SuffixTrie trie_;
  std::vector<int32_t> active_;
  std::vector<int32_t> scratch_;
  int shared_len_ = -1;   // the shared cache's last match length (-1: none yet)
  size_t shared_at_ = 0;  // seq_.size() then
};

// The longest match that leaves a trie of depth max_depth room for k proposed tokens: max(1, max_depth - k).
// A match at the trie's full depth has no continuation left to walk (a sequence copying a long text would
// draft one token per step); its suffix of this length occurs with the same continuations and more.
int suffix_match_cap(int max_depth, int k);

// Proposal length cap for a match of `match_len` tokens (max_spec_factor × match + offset, ≤ k).
int suffix_spec_limit(const SuffixOptions& opt, int match_len, int k);

}  // namespace frost
