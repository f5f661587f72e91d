// Hugging Face tokenizer.json BPE: the GPT-2 byte alphabet, decoders, the BPE merge loop,
// and encode / decode. Contract and the choices we made are in tokenizer_bpe.h. The other
// pieces are in tokenizer_bpe_regex.cc (regexes, pre-tokenizers) and tokenizer_bpe_json.cc
// (parsing); what they share is declared in tokenizer_bpe_internal.h.
#include "core/model/tokenizer_bpe.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/common/utf8.h"
#include "core/model/tokenizer_bpe_internal.h"

namespace frost {
namespace bpe_internal {

// ---------------------------------------------------------------------------------------
// The GPT-2 byte alphabet (the UTF-8 helpers are inline in tokenizer_bpe_internal.h)
// ---------------------------------------------------------------------------------------

ByteAlphabet::ByteAlphabet() {
  to_byte.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : next++;
    append_utf8(to_char[static_cast<size_t>(b)], static_cast<char32_t>(cp));
    to_byte[static_cast<size_t>(cp)] = static_cast<int16_t>(b);
  }
}
const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

namespace {

// A byte-level token back to bytes; a token with any char outside the alphabet (e.g. an
// added token like "<|im_start|>") is kept as its UTF-8, as HF's ByteLevel decoder does.
std::string byte_level_to_bytes(const std::string& token) {
  const ByteAlphabet& a = byte_alphabet();
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const size_t n = char_len(token, i);
    const char32_t cp = decode_char(token, i, n);
    if (cp >= a.to_byte.size() || a.to_byte[cp] < 0) return token;
    out += static_cast<char>(a.to_byte[cp]);
    i += n;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Decoders
// ---------------------------------------------------------------------------------------

namespace {

// Strips up to `start` leading and `stop` trailing copies of `ch` (HF's Strip decoder).
std::string strip_chars(const std::string& token, const std::string& ch, size_t start,
                        size_t stop) {
  if (ch.empty()) return token;
  size_t b = 0, e = token.size();
  for (size_t k = 0; k < start && b < e && token.compare(b, ch.size(), ch) == 0; ++k) {
    b += ch.size();
  }
  for (size_t k = 0;
       k < stop && e >= b + ch.size() && token.compare(e - ch.size(), ch.size(), ch) == 0; ++k) {
    e -= ch.size();
  }
  return token.substr(b, e - b);
}

}  // namespace

void run_decoders(const std::vector<DecoderStage>& stages, std::vector<std::string>& tokens, bool stream) {
  for (const DecoderStage& stage : stages) {
    switch (stage.kind) {
      case DecoderStage::kReplace:
        for (std::string& t : tokens) t = stage.pattern.replace_all(t, stage.content);
        break;
      case DecoderStage::kByteFallback: {
        // Consecutive <0xNN> tokens become their bytes when those form valid UTF-8; else each
        // one becomes U+FFFD (HF's rule, which differs from sentencepiece's per-byte one).
        std::vector<std::string> out;
        std::string bytes;
        size_t n_bytes = 0;
        auto flush = [&] {
          if (n_bytes == 0) return;
          if (stream || is_valid_utf8(bytes)) {
            out.push_back(bytes);
          } else {
            std::string repl;
            for (size_t k = 0; k < n_bytes; ++k) repl += "\xEF\xBF\xBD";
            out.push_back(std::move(repl));
          }
          bytes.clear();
          n_bytes = 0;
        };
        for (std::string& t : tokens) {
          const int byte = parse_byte_piece(t);
          if (byte >= 0) {
            bytes += static_cast<char>(byte);
            ++n_bytes;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case DecoderStage::kFuse:
        tokens = {absl::StrJoin(tokens, "")};
        break;
      case DecoderStage::kStrip:
        if (stream) break;
        for (std::string& t : tokens) t = strip_chars(t, stage.content, stage.start, stage.stop);
        break;
      case DecoderStage::kMetaspace:
        // HF drops every replacement char of the first token (not only a leading one) unless
        // the scheme is "never"; later ones become spaces.
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = !stream && i == 0 && stage.scheme != PrependScheme::kNever;
          tokens[i] = Pattern{stage.content, nullptr}.replace_all(tokens[i], drop ? "" : " ");
        }
        break;
      case DecoderStage::kByteLevel: {
        std::string all;
        for (const std::string& t : tokens) all += byte_level_to_bytes(t);
        tokens = {std::move(all)};
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// The BPE model
// ---------------------------------------------------------------------------------------

void BpeModel::tokenize_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    const int32_t id = lookup(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // 1. One symbol per char: its vocab id, else its bytes' <0xNN> ids (byte_fallback), else
  //    unk (consecutive unknown chars fused into one unk when fuse_unk), else dropped
  //    (no unk token), as HF does. Unlike HF, a pending fused unk is emitted before byte
  //    fallback symbols too; they only coexist when the vocab lacks some <0xNN>.
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  bool pending_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t n = char_len(word, i);
    const std::string_view ch = word.substr(i, n);
    i += n;
    if (const int32_t id = lookup(ch); id >= 0) {
      if (pending_unk) ids.push_back(unk_id);
      pending_unk = false;
      ids.push_back(id);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (const char c : ch) all = all && byte_ids[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        if (pending_unk) ids.push_back(unk_id);
        pending_unk = false;
        for (const char c : ch) ids.push_back(byte_ids[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id < 0) continue;
    if (pending_unk && !fuse_unk) ids.push_back(unk_id);
    pending_unk = true;
  }
  if (pending_unk) ids.push_back(unk_id);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

// 2. Repeatedly merges the adjacent pair with the lowest merge rank, the leftmost on ties.
// A heap of candidate pairs over a linked list of symbols makes this O(n log n) in the word
// length (no pre-tokenizer: a metaspace "word" is the whole text). Stale heap entries
// (a side already merged away) are detected by re-checking both ids.
void BpeModel::merge(std::vector<int32_t>& ids) const {
  const auto n = static_cast<int32_t>(ids.size());
  if (n < 2 || merges.empty()) return;
  std::vector<int32_t> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank, left, right, left_id, right_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const int32_t a = ids[static_cast<size_t>(l)], b = ids[static_cast<size_t>(r)];
    const auto it = merges.find(pair_key(a, b));
    if (it != merges.end()) heap.push({it->second.rank, l, r, a, b});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const auto l = static_cast<size_t>(c.left), r = static_cast<size_t>(c.right);
    if (next[l] != c.right || ids[l] != c.left_id || ids[r] != c.right_id) continue;
    ids[l] = merges.find(pair_key(c.left_id, c.right_id))->second.id;
    ids[r] = -1;  // dead
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = c.left;
    push(prev[l], c.left);
    push(c.left, next[l]);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[static_cast<size_t>(i)]) {
    ids[w++] = ids[static_cast<size_t>(i)];
  }
  ids.resize(w);
}

}  // namespace bpe_internal

// ---------------------------------------------------------------------------------------
// The tokenizer
// ---------------------------------------------------------------------------------------

using bpe_internal::apply_pre_tokenizer_stage;
using bpe_internal::char_len;
using bpe_internal::decode_char;
using bpe_internal::is_unicode_space;
using bpe_internal::NormalizerStage;
using bpe_internal::Piece;
using bpe_internal::PreTokenizerStage;
using bpe_internal::run_decoders;

std::string BpeTokenizer::Impl::normalize(std::string text) const {
  for (const NormalizerStage& stage : normalizers) {
    switch (stage.kind) {
      case NormalizerStage::kReplace:
        text = stage.pattern.replace_all(text, stage.content);
        break;
      case NormalizerStage::kPrepend:
        if (!text.empty()) text = stage.content + text;
        break;
      case NormalizerStage::kStrip: {
        size_t b = 0, e = text.size();
        while (stage.left && b < e) {
          const size_t n = char_len(text, b);
          if (!is_unicode_space(decode_char(text, b, n))) break;
          b += n;
        }
        while (stage.right && e > b) {
          size_t s = e - 1;  // back up to the start of the last char
          while (s > b && (static_cast<uint8_t>(text[s]) & 0xC0) == 0x80) --s;
          if (!is_unicode_space(decode_char(text, s, e - s))) break;
          e = s;
        }
        text = text.substr(b, e - b);
        break;
      }
      case NormalizerStage::kUnicode:
        text = bpe_internal::unicode_normalize(text, stage.form);
        break;
    }
  }
  return text;
}

std::vector<Piece> BpeTokenizer::Impl::pre_tokenize(std::string_view text, bool at_start) const {
  std::vector<Piece> pieces_now;
  std::string normalized = normalize(std::string(text));
  if (!normalized.empty()) pieces_now.push_back({std::move(normalized), at_start});
  for (const PreTokenizerStage& stage : pre_tokenizers) {
    std::vector<Piece> next;
    for (const Piece& p : pieces_now) apply_pre_tokenizer_stage(stage, p, next);
    pieces_now = std::move(next);
  }
  return pieces_now;
}

// HF's order: added tokens matched in the raw text split it first; each span between them is
// normalized on its own (so a Prepend normalizer applies to each), then split by the normalized
// added tokens; what remains is pre-tokenized and run through BPE.
void BpeTokenizer::Impl::encode(std::string_view text, bool with_special,
                                std::vector<int32_t>& out) const {
  for (const auto& span : added_raw.split(text, with_special)) {
    if (span.id >= 0) {
      out.push_back(span.id);
      continue;
    }
    const std::string_view raw = text.substr(span.b, span.e - span.b);
    if (added_normalized.empty()) {
      for (const Piece& p : pre_tokenize(raw, span.b == 0)) tokenize_cached(p.text, out);
      continue;
    }
    const std::string normalized = normalize(std::string(raw));
    for (const auto& sub : added_normalized.split(normalized, with_special)) {
      if (sub.id >= 0) {
        out.push_back(sub.id);
        continue;
      }
      // Already normalized: only the pre-tokenizer is left.
      std::vector<Piece> pieces_now{{normalized.substr(sub.b, sub.e - sub.b), span.b == 0 && sub.b == 0}};
      for (const PreTokenizerStage& stage : pre_tokenizers) {
        std::vector<Piece> next;
        for (const Piece& p : pieces_now) apply_pre_tokenizer_stage(stage, p, next);
        pieces_now = std::move(next);
      }
      for (const Piece& p : pieces_now) tokenize_cached(p.text, out);
    }
  }
}

void BpeTokenizer::Impl::tokenize_cached(const std::string& word, std::vector<int32_t>& out) const {
  if (pre_tokenizers.empty() || word.size() > kMaxCachedWordBytes) {
    model.tokenize_word(word, out);
    return;
  }
  {
    absl::ReaderMutexLock lock(&cache_mu);
    const auto it = cache.find(word);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  model.tokenize_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  absl::MutexLock lock(&cache_mu);
  if (cache.size() < kCacheCapacity) cache.emplace(word, std::move(ids));
}

std::string BpeTokenizer::Impl::decode(absl::Span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= pieces.size()) continue;
    const auto i = static_cast<size_t>(id);
    if (special[i] || pieces[i].empty()) continue;
    tokens.push_back(pieces[i]);
  }
  // Without a decoder HF joins the tokens with spaces.
  if (!has_decoder) return sanitize_utf8(absl::StrJoin(tokens, " "));
  run_decoders(decoders, tokens, /*stream=*/false);
  return sanitize_utf8(absl::StrJoin(tokens, ""));
}

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::encode(std::string_view text,
                                                          bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && impl_->bos >= 0) ids.push_back(impl_->bos);
  impl_->encode(is_valid_utf8(text) ? text : sanitize_utf8(text), /*with_special=*/false, ids);
  return ids;
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::encode_with_specials(std::string_view text,
                                                                        bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && impl_->bos >= 0) ids.push_back(impl_->bos);
  impl_->encode(is_valid_utf8(text) ? text : sanitize_utf8(text), /*with_special=*/true, ids);
  return ids;
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  const std::string valid = is_valid_utf8(text) ? std::string(text) : sanitize_utf8(text);
  for (Piece& p : impl_->pre_tokenize(valid, true)) words.push_back(std::move(p.text));
  return words;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return impl_->token_bytes[static_cast<size_t>(id)];
}

std::string BpeTokenizer::decode(absl::Span<const int32_t> ids) const { return impl_->decode(ids); }

std::string BpeTokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return impl_->pieces[static_cast<size_t>(id)];
}

int32_t BpeTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->pieces.size()); }
int32_t BpeTokenizer::bos_id() const { return impl_->bos; }
int32_t BpeTokenizer::eos_id() const { return impl_->eos; }

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[static_cast<size_t>(id)];
}

std::string BpeTokenizer::kind() const {
  return impl_->byte_level ? "bpe-bytelevel" : "bpe-metaspace";
}

}  // namespace frost
