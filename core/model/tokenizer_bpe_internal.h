#pragma once
// Internal to the tokenizer_bpe*.cc files (not part of frost's API): the types they share.
//  * tokenizer_bpe_regex.cc: HfRegex, Pattern and the pre-tokenizer stages.
//  * tokenizer_bpe_json.cc:  tokenizer.json parsing, BpeTokenizer::parse / load.
//  * tokenizer_bpe.cc:       the byte alphabet, decoders, the BPE model, encode / decode.
// The contract and the choices we made are in tokenizer_bpe.h.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/model/tokenizer_bpe.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace frost {
namespace bpe_internal {

// ---------------------------------------------------------------------------------------
// UTF-8 and the GPT-2 byte alphabet
// ---------------------------------------------------------------------------------------

// Length of the UTF-8 sequence starting at s[i]. Input is valid UTF-8 (encode sanitizes it);
// a stray byte still counts as one so loops always advance.
inline size_t char_len(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  return i + n <= s.size() ? n : 1;
}

inline char32_t decode_char(std::string_view s, size_t i, size_t n) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (n == 1) return b0;
  char32_t cp = b0 & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

// Unicode White_Space: what Oniguruma's \s (HF's regex engine) and Rust's
// char::is_whitespace (HF's Strip) accept. RE2's \s is ASCII-only, so we spell this set out.
inline bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// GPT-2's map from bytes to printable code points: the printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order, so every byte is a visible char.
struct ByteAlphabet {
  std::array<std::string, 256> to_char;  // byte → UTF-8 of its code point
  std::array<int16_t, 324> to_byte;      // code point (< 324) → byte, or -1
  ByteAlphabet();                        // in tokenizer_bpe.cc
};
const ByteAlphabet& byte_alphabet();

// ---------------------------------------------------------------------------------------
// Regexes: Oniguruma syntax (what tokenizer.json patterns are written for) run on RE2
// (tokenizer_bpe_regex.cc)
// ---------------------------------------------------------------------------------------

// A tokenizer.json regex compiled for RE2. RE2 has no lookahead, so a top-level alternative
// `\s+(?!\S)` is emulated exactly: at a position where the alternatives before it fail, a run
// of whitespace matches whole when it reaches the end of the text, and otherwise all of it but
// its last char (which is then followed by whitespace, satisfying (?!\S)); a run of one char
// followed by a non-space fails and the later alternatives are tried. Leftmost-first order
// is kept: `relaxed_` (lookahead dropped, so it matches wherever the original can) finds the
// earliest candidate start, and the exact alternatives are then tried there in order.
class HfRegex {
 public:
  static absl::StatusOr<std::shared_ptr<const HfRegex>> compile(const std::string& pattern);
  ~HfRegex();

  // Leftmost match starting at or after `pos`: [*b, *e). False when there is none.
  bool find(std::string_view text, size_t pos, size_t* b, size_t* e) const;

 private:
  HfRegex() = default;
  static absl::StatusOr<std::unique_ptr<re2::RE2>> make_re2(const std::string& pattern);

  // The original pattern's alternatives, in order, anchored at `p`.
  bool match_exact_at(std::string_view text, size_t p, size_t* e) const;

  bool emulate_ = false;
  std::unique_ptr<re2::RE2> relaxed_;
  std::unique_ptr<re2::RE2> before_;  // alternatives before the emulated one (may be null)
  std::unique_ptr<re2::RE2> after_;   // alternatives after it (may be null)
};

// A tokenizer.json "pattern": {"String": literal} or {"Regex": oniguruma}.
struct Pattern {
  std::string literal;
  std::shared_ptr<const HfRegex> regex;  // null for a literal

  // Non-overlapping matches, left to right, as [begin, end) byte spans.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  std::string replace_all(std::string_view text, std::string_view content) const;
};

// ---------------------------------------------------------------------------------------
// Pipeline stages (parsed from JSON in tokenizer_bpe_json.cc)
// ---------------------------------------------------------------------------------------

enum class PrependScheme { kFirst, kAlways, kNever };
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

enum class UnicodeForm { kNFC, kNFD, kNFKC, kNFKD };

struct NormalizerStage {
  enum Kind { kReplace, kPrepend, kStrip, kUnicode } kind;
  Pattern pattern;                   // kReplace
  std::string content;               // kReplace: replacement; kPrepend: prefix
  bool left = false, right = false;  // kStrip
  UnicodeForm form = UnicodeForm::kNFC;  // kUnicode
};

// Unicode normalization of valid UTF-8 (tokenizer_bpe_unicode.cc, ICU's Normalizer2).
// unicode_normalization_available() is false when frost was built without ICU; the parser then
// refuses the NFC/NFD/NFKC/NFKD normalizers by name instead of producing different ids.
bool unicode_normalization_available();
std::string unicode_normalize(std::string_view text, UnicodeForm form);

struct PreTokenizerStage {
  enum Kind { kSplit, kMetaspace, kByteLevel } kind;
  Pattern pattern;  // kSplit; kByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  std::string replacement;  // kMetaspace
  PrependScheme scheme = PrependScheme::kAlways;
  bool split = true;              // kMetaspace
  bool add_prefix_space = false;  // kByteLevel
};

struct DecoderStage {
  enum Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace, kByteLevel } kind;
  Pattern pattern;             // kReplace
  std::string content;         // kReplace: replacement; kStrip: the char; kMetaspace: replacement
  size_t start = 0, stop = 0;  // kStrip
  PrependScheme scheme = PrependScheme::kAlways;  // kMetaspace
};

// A pre-tokenized piece. `at_start`: it begins at offset 0 of the normalized text (what the
// Metaspace prepend_scheme "first" tests).
struct Piece {
  std::string text;
  bool at_start;
};

// Runs one pre-tokenizer stage on `piece`, appending the pieces it yields to `out`
// (tokenizer_bpe_regex.cc).
void apply_pre_tokenizer_stage(const PreTokenizerStage& stage, const Piece& piece, std::vector<Piece>& out);

// Runs the decoder chain over `tokens` in place. `stream`: the tokens are one token at a time
// of a generated stream (token_bytes), so whole-text edge rules are skipped: the Strip decoder
// and the Metaspace first-token rule (both drop the text's leading space), and byte groups are
// not validated as UTF-8 (the stream's consumer assembles multi-byte chars).
// (tokenizer_bpe.cc)
void run_decoders(const std::vector<DecoderStage>& stages, std::vector<std::string>& tokens, bool stream);

// ---------------------------------------------------------------------------------------
// Added tokens (tokenizer.json "added_tokens"; tokenizer_bpe_added.cc)
// ---------------------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false;  // the match also takes the whitespace left / right of it
  bool normalized = false;              // matched in the normalized text (else in the raw text)
  bool single_word = false;             // only where no word char touches it
};

// Finds added tokens in text the way Hugging Face's AddedVocabulary does: leftmost-longest
// matches (a byte trie), lstrip / rstrip widening a match over Unicode whitespace, single_word
// refusing a match next to a word char. Special tokens take part only when asked to.
class AddedTokenMatcher {
 public:
  void add(AddedToken token);
  bool empty() const { return tokens_.empty(); }

  // [b, e) of `text`: an added token's id, or -1 for plain text between matches. Covers the
  // whole text in order; no empty span.
  struct Span {
    size_t b, e;
    int32_t id;
  };
  std::vector<Span> split(std::string_view text, bool with_special) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // byte → node, sorted
    int32_t token = -1;                             // index into tokens_ ending here
  };
  int32_t child(int32_t node, uint8_t byte) const;
  std::vector<Node> nodes_{Node{}};
  std::vector<AddedToken> tokens_;
};

// ---------------------------------------------------------------------------------------
// The BPE model
// ---------------------------------------------------------------------------------------

struct Merge {
  int32_t rank;
  int32_t id;  // the merged token
};

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct BpeModel {
  absl::flat_hash_map<std::string, int32_t> vocab;
  absl::flat_hash_map<uint64_t, Merge> merges;  // pair_key(left id, right id) → merge
  std::array<int32_t, 256> byte_ids;            // id of "<0xNN>", or -1
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  int32_t lookup(std::string_view s) const {
    const auto it = vocab.find(absl::string_view(s.data(), s.size()));
    return it == vocab.end() ? -1 : it->second;
  }

  // Appends the ids of one pre-tokenized word.
  void tokenize_word(std::string_view word, std::vector<int32_t>& out) const;

  // Step 2 of tokenize_word: merges `ids` in place (see the definition).
  void merge(std::vector<int32_t>& ids) const;
};

}  // namespace bpe_internal

// ---------------------------------------------------------------------------------------
// The tokenizer
// ---------------------------------------------------------------------------------------
struct BpeTokenizer::Impl {
  std::vector<bpe_internal::NormalizerStage> normalizers;
  std::vector<bpe_internal::PreTokenizerStage> pre_tokenizers;
  bool has_decoder = false;
  std::vector<bpe_internal::DecoderStage> decoders;
  bpe_internal::BpeModel model;
  std::vector<std::string> pieces;       // [vocab] id → token string ("" for unused ids)
  std::vector<bool> special;             // [vocab]
  std::vector<std::string> token_bytes;  // [vocab]
  int32_t bos = -1, eos = -1;
  bool byte_level = false;
  // Added tokens matched in the raw text (normalized: false) and in the normalized text.
  bpe_internal::AddedTokenMatcher added_raw, added_normalized;

  // Word → ids. Words repeat a lot in text, and BPE on a word costs far more than a lookup.
  // Bounded (at most ~8 MB): once full, new words are tokenized without being cached. Without
  // a pre-tokenizer the "word" is the whole text, which rarely repeats, so nothing is cached.
  static constexpr size_t kCacheCapacity = 1 << 15;
  static constexpr size_t kMaxCachedWordBytes = 64;
  mutable absl::Mutex cache_mu;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache ABSL_GUARDED_BY(cache_mu);
  std::string normalize(std::string text) const;
  // Normalizer + pre-tokenizer on a span of text without added tokens; `at_start`: the span
  // begins the input (Metaspace prepend_scheme "first").
  std::vector<bpe_internal::Piece> pre_tokenize(std::string_view text, bool at_start) const;
  // The whole pipeline: added tokens (special ones only when `with_special`), normalizer,
  // pre-tokenizer, BPE. `text` is valid UTF-8.
  void encode(std::string_view text, bool with_special, std::vector<int32_t>& out) const;
  void tokenize_cached(const std::string& word, std::vector<int32_t>& out) const;
  std::string decode(absl::Span<const int32_t> ids) const;
};

}  // namespace frost
