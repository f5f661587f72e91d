#pragma once
// The vocabulary side of constrained decoding: which tokens may come next.
//
// TokenVocab: the byte string of every token, in a byte trie (immutable, shared by all requests of a model).
// Matcher: one per request; holds the recogniser state and answers allowed() — a bitmask over the
//   vocabulary of tokens whose whole byte string the grammar can consume from here — and accept_token().
// MaskCache: masks keyed by the canonical recogniser state, shared by all matchers of one (grammar, vocab).
//
// Limits: a trie-walk step that hits a recogniser limit (max_stacks / max_stack_depth) leaves the token
// out of the mask and marks the mask (StateMask::over_limit, kept in the cache); Matcher::health() turns
// that — and an empty mask before the output is complete — into an error the engine ends the request with.
//
// Cost: an uncached allowed() walks the trie depth-first, advancing the recogniser state by one byte per
// trie edge and skipping every subtree whose prefix is already dead; states are interned and each (state,
// byte) transition is memoised in the recogniser, so a walk costs about one hash lookup per live trie node
// plus one expansion per distinct transition. Measured on a 31k-token vocabulary (all 1-3 byte strings of
// 31 characters + 256 byte tokens; Release build, shared 2-core x86 host, fastest of 5; see
// tests/unit/constrain/token_mask_test.cc): ~0.01 ms where few tokens fit (object start, after `{"`),
// ~0.15-0.25 ms inside a number (500-2000 tokens fit), ~0.5 ms inside a free string (32k tokens fit). A
// cached allowed() costs one canonical-key build (proportional to the stacks' total depth) plus one hash
// lookup under a mutex: ~1-4 us. JSON generation revisits few distinct states, so most steps hit the cache.

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/constrain/grammar.h"

namespace frost::constrain {

// Bit i of words[i / 32] (bit i % 32) set = token i allowed.
struct TokenBitmask {
  int32_t n_tokens = 0;
  std::vector<uint32_t> words;

  explicit TokenBitmask(int32_t n = 0) : n_tokens(n), words((n + 31) / 32, 0u) {}
  bool test(int32_t id) const { return (words[id >> 5] >> (id & 31)) & 1u; }
  void set(int32_t id) { words[id >> 5] |= 1u << (id & 31); }
  int32_t count() const;
};

class TokenVocab {
 public:
  // token_bytes[i] = the bytes token i detokenizes to (index = token id). special[i] marks control tokens:
  // never allowed, except the ids in eos_ids, which are allowed exactly when the output is complete (an
  // EOS id is treated as EOS only, whatever its bytes). Tokens with empty bytes are never allowed.
  // `special` may be empty (no special tokens). Refuses sizes that disagree and eos ids out of range.
  static absl::StatusOr<std::shared_ptr<const TokenVocab>> create(std::vector<std::string> token_bytes,
                                                                 std::vector<bool> special,
                                                                 std::vector<int32_t> eos_ids);

  int32_t n_tokens() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool is_special(int32_t id) const { return special_[id]; }
  bool is_eos(int32_t id) const;
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

  // The trie in depth-first preorder: node i's subtree is [i, subtree_end); its tokens (the ids whose
  // bytes end exactly at it) are trie_tokens[tokens_begin, tokens_end).
  struct TrieNode {
    uint8_t byte;
    uint32_t depth;  // bytes from the root (root's children have depth 1)
    uint32_t subtree_end;
    uint32_t tokens_begin, tokens_end;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  // Of the tokens `allowed` whose bytes are a non-empty prefix of `text`, the longest; among tokens with the
  // same bytes the highest id (SentencePiece numbers its byte-fallback tokens <0x..> first, and a model writes
  // the regular piece); -1 when none. A walk down the trie: O(len(text) × children).
  int32_t longest_prefix_token(absl::string_view text, const TokenBitmask& allowed) const;
  uint32_t max_depth() const { return max_depth_; }

 private:
  TokenVocab() = default;
  std::vector<std::string> bytes_;
  std::vector<bool> special_;
  std::vector<int32_t> eos_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  uint32_t max_depth_ = 0;
};

// A mask with what computing it found; cached as one piece, so a mask that a recogniser limit truncated is
// still marked when another matcher gets it from the cache.
struct StateMask {
  TokenBitmask bits;
  // kNone: exact. Otherwise the trie walk hit this limit on some token's bytes and left that token out —
  // the mask may lack valid tokens (Matcher::health() reports it).
  Recognizer::Limit over_limit = Recognizer::Limit::kNone;
  bool empty = false;  // no token at all (EOS included) is allowed

  explicit StateMask(int32_t n_tokens = 0) : bits(n_tokens) {}
};

// Masks by canonical recogniser state, for one (grammar, vocabulary) pair; least recently used entries
// are evicted past `max_entries` (each costs n_tokens / 8 bytes). Thread-safe.
class MaskCache {
 public:
  explicit MaskCache(size_t max_entries) : max_entries_(max_entries) {}
  std::shared_ptr<const StateMask> find(const std::string& key);
  void insert(const std::string& key, std::shared_ptr<const StateMask> mask);
  struct Stats {
    int64_t hits = 0, misses = 0, entries = 0;
    size_t bytes = 0;  // masks and keys held
  };
  Stats stats() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const StateMask>>;
  const size_t max_entries_;
  mutable absl::Mutex mu_;
  std::list<Entry> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  static size_t entry_bytes(const Entry& e) {
    return 2 * e.first.size() + 96 + (e.second ? e.second->bits.words.size() * sizeof(uint32_t) : 0);
  }
};

// Constrains one request. Not thread-safe (the engine thread owns it); mutated only by accept_token().
class Matcher {
 public:
  // `cache` may be null (no sharing).
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab,
          std::shared_ptr<MaskCache> cache);

  // Tokens that may come next: non-special tokens whose full bytes the grammar can consume from here, plus
  // the EOS ids when the output is complete. Valid until the next accept_token(). All zero once finished.
  // A token whose bytes would take the recogniser past max_stacks / max_stack_depth is left out, and
  // health() then says so: check it after every allowed().
  const TokenBitmask& allowed();
  // Advances past token `id`. INVALID_ARGUMENT for an id out of range, or when stepping through its bytes
  // hits a recogniser limit (the same message as health(), which reports it from then on);
  // FAILED_PRECONDITION when the token is not allowed. The state is unchanged on any error. Accepting an
  // EOS id finishes the matcher.
  absl::Status accept_token(int32_t id);
  // Whether the constraint can still be followed exactly, as of the latest allowed() and accept_token():
  //   OK — yes (also before the first allowed(), and once finished);
  //   INVALID_ARGUMENT "constraint too ambiguous to track exactly after N output bytes: more than 512
  //     parses are alive (max_stacks)" (or "a parse nests deeper than 4096 (max_stack_depth)") — a token's
  //     bytes hit a recogniser limit: the mask may lack valid tokens;
  //   FAILED_PRECONDITION "no token of the vocabulary can continue the output the constraint requires after
  //     N bytes (next bytes allowed: [0-9])" — allowed() is empty although the output is not complete.
  // The engine ends the request with this status instead of a silent stop. Cheap (no recomputation).
  absl::Status health() const;
  // Bytes of output accepted so far.
  int64_t n_output_bytes() const { return n_bytes_; }
  // The output so far is a complete match: EOS is allowed.
  bool accepting() const { return !finished_ && rec_.accepting(); }
  // Complete and no byte can follow: the caller should end the sequence now.
  bool must_end() const { return !finished_ && rec_.must_end(); }
  bool finished() const { return finished_; }
  bool limit_hit() const { return rec_.limit_hit(); }
  const Recognizer& recognizer() const { return rec_; }
  int64_t n_masks_computed() const { return n_computed_; }

  // The reference for allowed(): feeds every token's bytes to a copy of the state (tests compare them).
  TokenBitmask allowed_brute_force();

  // Speculative decoding (core/generate/sequence.h shape_draft): the engine walks drafted tokens through the
  // matcher to learn each position's mask, then comes back. mark() saves the state; rewind() restores it
  // exactly (state, mask, bytes, finished, limits). While a mark is held accept_token() does not compact the
  // recogniser's arena (which would renumber the saved state); one mark at a time.
  struct Mark {
    Recognizer::StackSet state;
    std::shared_ptr<const StateMask> mask;
    bool finished = false;
    Recognizer::Limit accept_limit = Recognizer::Limit::kNone;
    int64_t n_bytes = 0;
  };
  Mark mark();
  void rewind(Mark m);
  // Jump-forward (speculative decoding's grammar drafter): the bytes every continuation of the output starts
  // with from here (the grammar allows exactly one next byte, state after state, and EOS is not allowed on the
  // way), at most max_bytes; then the token to draft for them: of the allowed tokens whose bytes are a prefix
  // of those bytes, the longest (TokenVocab::longest_prefix_token); -1 when the text is not forced or no such
  // token is allowed. The model decides whether it writes the forced text with that token: the draft is verified.
  std::string forced_bytes(size_t max_bytes);
  int32_t jump_token(size_t max_bytes = 64);
  // allowed()'s mask as a shared object: it stays valid after accept_token() (the draft's masks).
  std::shared_ptr<const StateMask> allowed_shared() {
    allowed();
    return mask_;
  }

 private:
  void compute(StateMask* mask);
  absl::Status too_ambiguous(Recognizer::Limit limit) const;

  std::shared_ptr<const TokenVocab> vocab_;
  std::shared_ptr<MaskCache> cache_;
  Recognizer rec_;
  std::shared_ptr<const StateMask> mask_;  // for the current state; null until allowed()
  std::vector<uint32_t> levels_;  // trie-walk scratch: interned state per depth
  bool finished_ = false;
  Recognizer::Limit accept_limit_ = Recognizer::Limit::kNone;  // an accept_token() step hit this limit
  int64_t n_bytes_ = 0;
  int64_t n_computed_ = 0;
  bool marked_ = false;  // a Mark is held: no compaction
};

}  // namespace frost::constrain
