// Added tokens of a tokenizer.json: finding them in text (AddedTokenMatcher) the way Hugging
// Face's AddedVocabulary does. Shared declarations are in tokenizer_bpe_internal.h; the policy
// for special-token text (when special tokens take part) is in tokenizer_bpe.h.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/model/tokenizer_bpe_internal.h"

namespace frost {
namespace bpe_internal {
namespace {

// The char ending just before byte `e` of `s` (valid UTF-8), and where it starts.
char32_t char_before(std::string_view s, size_t e, size_t* start) {
  size_t b = e - 1;
  while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
  *start = b;
  return decode_char(s, b, e - b);
}

// single_word's notion of a word char: ASCII letters, digits and '_', and any non-ASCII char
// that is not whitespace (an approximation of Rust's char::is_alphanumeric without Unicode
// tables; none of the tokenizer.json files we verify against sets single_word).
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !is_unicode_space(c);
}

}  // namespace

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  const auto& next = nodes_[static_cast<size_t>(node)].next;
  const auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(byte, int32_t{-1}));
  return it != next.end() && it->first == byte ? it->second : -1;
}

void AddedTokenMatcher::add(AddedToken token) {
  if (token.content.empty()) return;  // matches nothing (HF skips empty contents too)
  int32_t node = 0;
  for (const char ch : token.content) {
    const auto byte = static_cast<uint8_t>(ch);
    int32_t c = child(node, byte);
    if (c < 0) {
      c = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& next = nodes_[static_cast<size_t>(node)].next;
      next.insert(std::lower_bound(next.begin(), next.end(), std::make_pair(byte, int32_t{-1})),
                  std::make_pair(byte, c));
    }
    node = c;
  }
  // The same content twice: the later entry wins, as in HF's map from content to token.
  int32_t& slot = nodes_[static_cast<size_t>(node)].token;
  if (slot >= 0) {
    tokens_[static_cast<size_t>(slot)] = std::move(token);
  } else {
    slot = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(std::move(token));
  }
}

std::vector<AddedTokenMatcher::Span> AddedTokenMatcher::split(std::string_view text,
                                                              bool with_special) const {
  std::vector<Span> spans;
  size_t plain_from = 0;  // start of the plain text not yet emitted
  for (size_t i = 0; i < text.size();) {
    // The longest eligible token starting at i.
    int32_t best = -1;
    size_t best_end = 0;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      const int32_t t = nodes_[static_cast<size_t>(node)].token;
      if (t < 0) continue;
      const AddedToken& tok = tokens_[static_cast<size_t>(t)];
      if (tok.special && !with_special) continue;
      if (tok.single_word) {
        size_t unused;
        if (i > 0 && is_word_char(char_before(text, i, &unused))) continue;
        if (j + 1 < text.size()) {
          const size_t n = char_len(text, j + 1);
          if (is_word_char(decode_char(text, j + 1, n))) continue;
        }
      }
      best = t;
      best_end = j + 1;
    }
    if (best < 0) {
      i += char_len(text, i);
      continue;
    }
    const AddedToken& tok = tokens_[static_cast<size_t>(best)];
    size_t b = i, e = best_end;
    // lstrip takes the whitespace before the match, but not what an earlier match took.
    while (tok.lstrip && b > plain_from) {
      size_t s;
      if (!is_unicode_space(char_before(text, b, &s))) break;
      b = s;
    }
    while (tok.rstrip && e < text.size()) {
      const size_t n = char_len(text, e);
      if (!is_unicode_space(decode_char(text, e, n))) break;
      e += n;
    }
    if (b > plain_from) spans.push_back({plain_from, b, -1});
    spans.push_back({b, e, tok.id});
    plain_from = i = e;
  }
  if (plain_from < text.size()) spans.push_back({plain_from, text.size(), -1});
  return spans;
}

}  // namespace bpe_internal
}  // namespace frost
