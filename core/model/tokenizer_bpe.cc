// Hugging Face tokenizer.json BPE: parsing, normalizers, pre-tokenizers, the BPE merge loop
// and decoders. Contract and the choices we made are in tokenizer_bpe.h. The pieces are kept
// in one file because frost_core lists its sources explicitly; the sections below are
// independent and could move to their own files.
#include "core/model/tokenizer_bpe.h"

#include <re2/re2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/common/status_macros.h"
#include "core/common/utf8.h"

namespace frost {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------
// UTF-8 and the GPT-2 byte alphabet
// ---------------------------------------------------------------------------------------

// Length of the UTF-8 sequence starting at s[i]. Input is valid UTF-8 (encode sanitizes it);
// a stray byte still counts as one so loops always advance.
size_t char_len(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  return i + n <= s.size() ? n : 1;
}

char32_t decode_char(std::string_view s, size_t i, size_t n) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (n == 1) return b0;
  char32_t cp = b0 & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

// Unicode White_Space: what Oniguruma's \s (HF's regex engine) and Rust's
// char::is_whitespace (HF's Strip) accept. RE2's \s is ASCII-only, so we spell this set out.
bool is_unicode_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}
constexpr char kSpaceClassBody[] =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
constexpr char kWordClassBody[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";  // Oniguruma's Unicode \w

// GPT-2's map from bytes to printable code points: the printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order, so every byte is a visible char.
struct ByteAlphabet {
  std::array<std::string, 256> to_char;  // byte → UTF-8 of its code point
  std::array<int16_t, 324> to_byte;      // code point (< 324) → byte, or -1
  ByteAlphabet() {
    to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : next++;
      append_utf8(to_char[static_cast<size_t>(b)], static_cast<char32_t>(cp));
      to_byte[static_cast<size_t>(cp)] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

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

// "<0x0A>" → 0x0A; -1 when `piece` is not a byte-fallback piece.
int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    const int digit = (c >= '0' && c <= '9')   ? c - '0'
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                               : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// ---------------------------------------------------------------------------------------
// Regexes: Oniguruma syntax (what tokenizer.json patterns are written for) run on RE2
// ---------------------------------------------------------------------------------------

// Splits `pattern` at its top-level '|' (outside groups and character classes).
std::vector<std::string> split_alternatives(const std::string& pattern) {
  std::vector<std::string> alts(1);
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      alts.back() += pattern.substr(i++, 2);
      continue;
    }
    if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
      alts.back() += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') alts.back() += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') alts.back() += pattern[++i];
      continue;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      alts.emplace_back();
      continue;
    }
    alts.back() += c;
  }
  return alts;
}

// Rewrites the Oniguruma escapes whose meaning differs in RE2 (\s \S \d \D \w \W are Unicode
// in Oniguruma, ASCII in RE2) and rejects lookarounds, which RE2 lacks.
absl::StatusOr<std::string> translate_regex(const std::string& alt) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < alt.size(); ++i) {
    const char c = alt[i];
    if (c == '\\' && i + 1 < alt.size()) {
      const char e = alt[++i];
      switch (e) {
        case 's':
          absl::StrAppend(&out, in_class ? "" : "[", kSpaceClassBody, in_class ? "" : "]");
          break;
        case 'w':
          absl::StrAppend(&out, in_class ? "" : "[", kWordClassBody, in_class ? "" : "]");
          break;
        case 'd':
          out += "\\p{Nd}";
          break;
        case 'D':
          out += "\\P{Nd}";
          break;
        case 'S':
        case 'W':
          if (in_class) {
            return absl::InvalidArgumentError(absl::StrCat(
                "regex \\", std::string(1, e), " inside a character class is not supported"));
          }
          absl::StrAppend(&out, "[^", e == 'S' ? kSpaceClassBody : kWordClassBody, "]");
          break;
        default:
          out += c;
          out += e;
      }
      continue;
    }
    if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < alt.size() && alt[i + 1] == '^') out += alt[++i];
      if (i + 1 < alt.size() && alt[i + 1] == ']') out += alt[++i];
      continue;
    } else if (c == '(' && alt.compare(i, 2, "(?") == 0 && i + 2 < alt.size()) {
      const std::string_view rest = std::string_view(alt).substr(i + 2);
      if (starts_with(rest, "=") || starts_with(rest, "!") || starts_with(rest, "<=") ||
          starts_with(rest, "<!")) {
        return absl::InvalidArgumentError(
            "regex lookaround is not supported (RE2); only the GPT-2 alternative "
            "\\s+(?!\\S) is emulated");
      }
      if (starts_with(rest, "<")) {  // Oniguruma named group (?<name>...) is RE2's (?P<name>...)
        out += "(?P";
        i += 1;
        continue;
      }
    }
    out += c;
  }
  return out;
}

// The alternative GPT-2-style patterns use to leave the last space of a run to the next word.
constexpr char kSpaceRunLookahead[] = "\\s+(?!\\S)";
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// A tokenizer.json regex compiled for RE2. RE2 has no lookahead, so a top-level alternative
// `\s+(?!\S)` is emulated exactly: at a position where the alternatives before it fail, a run
// of whitespace matches whole when it reaches the end of the text, and otherwise all of it but
// its last char (which is then followed by whitespace, satisfying (?!\S)); a run of one char
// followed by a non-space fails and the later alternatives are tried. Leftmost-first order
// is kept: `relaxed_` (lookahead dropped, so it matches wherever the original can) finds the
// earliest candidate start, and the exact alternatives are then tried there in order.
class HfRegex {
 public:
  static absl::StatusOr<std::shared_ptr<const HfRegex>> compile(const std::string& pattern) {
    auto rx = std::shared_ptr<HfRegex>(new HfRegex());
    const std::vector<std::string> alts = split_alternatives(pattern);
    std::vector<std::string> before, after, relaxed;
    for (const std::string& alt : alts) {
      if (alt == kSpaceRunLookahead) {
        if (rx->emulate_) {
          return absl::InvalidArgumentError("regex has \\s+(?!\\S) twice");
        }
        rx->emulate_ = true;
        relaxed.push_back(absl::StrCat("[", kSpaceClassBody, "]+"));
        continue;
      }
      FROST_ASSIGN_OR_RETURN(std::string t, translate_regex(alt));
      (rx->emulate_ ? after : before).push_back(t);
      relaxed.push_back(std::move(t));
    }
    FROST_ASSIGN_OR_RETURN(rx->relaxed_, make_re2(absl::StrJoin(relaxed, "|")));
    if (rx->emulate_) {
      if (!before.empty()) {
        FROST_ASSIGN_OR_RETURN(rx->before_, make_re2(absl::StrJoin(before, "|")));
      }
      if (!after.empty()) {
        FROST_ASSIGN_OR_RETURN(rx->after_, make_re2(absl::StrJoin(after, "|")));
      }
    }
    return std::shared_ptr<const HfRegex>(std::move(rx));
  }

  // Leftmost match starting at or after `pos`: [*b, *e). False when there is none.
  bool find(std::string_view text, size_t pos, size_t* b, size_t* e) const {
    const re2::StringPiece sp(text.data(), text.size());
    while (pos <= text.size()) {
      re2::StringPiece m;
      if (!relaxed_->Match(sp, pos, text.size(), RE2::UNANCHORED, &m, 1)) return false;
      const auto start = static_cast<size_t>(m.data() - text.data());
      if (!emulate_) {
        *b = start;
        *e = start + m.size();
        return true;
      }
      if (match_exact_at(text, start, e)) {
        *b = start;
        return true;
      }
      if (start >= text.size()) return false;
      pos = start + char_len(text, start);
    }
    return false;
  }

 private:
  HfRegex() = default;

  static absl::StatusOr<std::unique_ptr<RE2>> make_re2(const std::string& pattern) {
    RE2::Options opts;
    opts.set_log_errors(false);
    auto re = std::make_unique<RE2>(pattern, opts);
    if (!re->ok()) {
      return absl::InvalidArgumentError(absl::StrCat("regex rejected by RE2: ", re->error()));
    }
    return re;
  }

  // The original pattern's alternatives, in order, anchored at `p`.
  bool match_exact_at(std::string_view text, size_t p, size_t* e) const {
    const re2::StringPiece sp(text.data(), text.size());
    re2::StringPiece m;
    if (before_ && before_->Match(sp, p, text.size(), RE2::ANCHOR_START, &m, 1)) {
      *e = p + m.size();
      return true;
    }
    size_t q = p, last = p, n_chars = 0;
    while (q < text.size()) {
      const size_t n = char_len(text, q);
      if (!is_unicode_space(decode_char(text, q, n))) break;
      last = q;
      q += n;
      ++n_chars;
    }
    if (n_chars > 0 && (q == text.size() || n_chars >= 2)) {
      *e = q == text.size() ? q : last;
      return true;
    }
    if (after_ && after_->Match(sp, p, text.size(), RE2::ANCHOR_START, &m, 1)) {
      *e = p + m.size();
      return true;
    }
    return false;
  }

  bool emulate_ = false;
  std::unique_ptr<RE2> relaxed_;
  std::unique_ptr<RE2> before_;  // alternatives before the emulated one (may be null)
  std::unique_ptr<RE2> after_;   // alternatives after it (may be null)
};

// A tokenizer.json "pattern": {"String": literal} or {"Regex": oniguruma}.
struct Pattern {
  std::string literal;
  std::shared_ptr<const HfRegex> regex;  // null for a literal

  // Non-overlapping matches, left to right, as [begin, end) byte spans.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> spans;
    if (!regex) {
      if (literal.empty()) return spans;
      for (size_t p = text.find(literal); p != std::string_view::npos;
           p = text.find(literal, p + literal.size())) {
        spans.emplace_back(p, p + literal.size());
      }
      return spans;
    }
    size_t pos = 0, b = 0, e = 0;
    while (pos <= text.size() && regex->find(text, pos, &b, &e)) {
      spans.emplace_back(b, e);
      if (e > b) {
        pos = e;
      } else if (e < text.size()) {
        pos = e + char_len(text, e);  // step over an empty match
      } else {
        break;
      }
    }
    return spans;
  }

  std::string replace_all(std::string_view text, std::string_view content) const {
    std::string out;
    size_t prev = 0;
    for (const auto& [b, e] : find_all(text)) {
      out.append(text.substr(prev, b - prev));
      out.append(content);
      prev = e;
    }
    out.append(text.substr(prev));
    return out;
  }
};

// ---------------------------------------------------------------------------------------
// Pipeline steps (parsed from JSON below)
// ---------------------------------------------------------------------------------------

enum class PrependScheme { kFirst, kAlways, kNever };
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct NormStep {
  enum Kind { kReplace, kPrepend, kStrip } kind;
  Pattern pattern;                   // kReplace
  std::string content;               // kReplace: replacement; kPrepend: prefix
  bool left = false, right = false;  // kStrip
};

struct PreStep {
  enum Kind { kSplit, kMetaspace, kByteLevel } kind;
  Pattern pattern;  // kSplit; kByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  std::string replacement;  // kMetaspace
  PrependScheme scheme = PrependScheme::kAlways;
  bool split = true;              // kMetaspace
  bool add_prefix_space = false;  // kByteLevel
};

struct DecStep {
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

// Cuts `text` at the spans of `pattern` and groups the parts per `behavior`, like HF's
// NormalizedString::split. Returns [begin, end) spans, possibly empty.
std::vector<std::pair<size_t, size_t>> split_spans(std::string_view text, const Pattern& pattern,
                                                   SplitBehavior behavior, bool invert) {
  struct Seg {
    size_t b, e;
    bool match;
  };
  std::vector<Seg> segs;
  size_t prev = 0;
  for (const auto& [b, e] : pattern.find_all(text)) {
    if (b > prev) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) segs.push_back({prev, text.size(), invert});

  std::vector<std::pair<size_t, size_t>> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Seg& s : segs) {
        if (!s.match) out.emplace_back(s.b, s.e);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Seg& s : segs) out.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::kMergedWithPrevious:
      // A match joins the piece before it, unless that piece is itself a match.
      for (const Seg& s : segs) {
        if (s.match && !previous_match && !out.empty()) {
          out.back().second = s.e;
        } else {
          out.emplace_back(s.b, s.e);
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      // Mirror image: walk backwards, a match joins the piece after it.
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !previous_match && !out.empty()) {
          out.back().first = it->b;
        } else {
          out.emplace_back(it->b, it->e);
        }
        previous_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Seg& s : segs) {
        if (s.match == previous_match && !out.empty()) {
          out.back().second = s.e;
        } else {
          out.emplace_back(s.b, s.e);
        }
        previous_match = s.match;
      }
      break;
  }
  return out;
}

void push_spans(const Piece& parent, std::string_view text,
                const std::vector<std::pair<size_t, size_t>>& spans, std::vector<Piece>& out) {
  for (const auto& [b, e] : spans) {
    if (e > b) out.push_back({std::string(text.substr(b, e - b)), parent.at_start && b == 0});
  }
}

void apply_pre_step(const PreStep& step, const Piece& piece, std::vector<Piece>& out) {
  switch (step.kind) {
    case PreStep::kSplit:
      push_spans(piece, piece.text,
                 split_spans(piece.text, step.pattern, step.behavior, step.invert), out);
      return;
    case PreStep::kMetaspace: {
      Pattern space{" ", nullptr};
      std::string t = space.replace_all(piece.text, step.replacement);
      const bool prepend = step.scheme == PrependScheme::kAlways ||
                           (step.scheme == PrependScheme::kFirst && piece.at_start);
      // Like HF's NormalizedString::prepend, nothing is prepended to an empty string.
      if (prepend && !t.empty() && !starts_with(t, step.replacement)) t = step.replacement + t;
      if (!step.split) {
        if (!t.empty()) out.push_back({std::move(t), piece.at_start});
        return;
      }
      const Pattern delim{step.replacement, nullptr};
      push_spans(piece, t, split_spans(t, delim, SplitBehavior::kMergedWithNext, false), out);
      return;
    }
    case PreStep::kByteLevel: {
      std::string t = piece.text;
      if (step.add_prefix_space && !t.empty() && t[0] != ' ') t.insert(t.begin(), ' ');
      std::vector<Piece> words;
      if (step.pattern.regex) {
        push_spans(piece, t, split_spans(t, step.pattern, SplitBehavior::kIsolated, false), words);
      } else if (!t.empty()) {
        words.push_back({std::move(t), piece.at_start});
      }
      const ByteAlphabet& a = byte_alphabet();
      for (Piece& w : words) {
        std::string mapped;
        mapped.reserve(w.text.size() * 2);
        for (const char c : w.text) mapped += a.to_char[static_cast<uint8_t>(c)];
        out.push_back({std::move(mapped), w.at_start});
      }
      return;
    }
  }
}

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

// Runs the decoder chain over `tokens` in place. `stream`: the tokens are one token at a time
// of a generated stream (token_bytes), so whole-text edge rules are skipped: the Strip decoder
// and the Metaspace first-token rule (both drop the text's leading space), and byte groups are
// not validated as UTF-8 (the stream's consumer assembles multi-byte chars).
void run_decoders(const std::vector<DecStep>& steps, std::vector<std::string>& tokens,
                  bool stream) {
  for (const DecStep& step : steps) {
    switch (step.kind) {
      case DecStep::kReplace:
        for (std::string& t : tokens) t = step.pattern.replace_all(t, step.content);
        break;
      case DecStep::kByteFallback: {
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
      case DecStep::kFuse:
        tokens = {absl::StrJoin(tokens, "")};
        break;
      case DecStep::kStrip:
        if (stream) break;
        for (std::string& t : tokens) t = strip_chars(t, step.content, step.start, step.stop);
        break;
      case DecStep::kMetaspace:
        // HF drops every replacement char of the first token (not only a leading one) unless
        // the scheme is "never"; later ones become spaces.
        for (size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = !stream && i == 0 && step.scheme != PrependScheme::kNever;
          tokens[i] = Pattern{step.content, nullptr}.replace_all(tokens[i], drop ? "" : " ");
        }
        break;
      case DecStep::kByteLevel: {
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

struct Merge {
  int32_t rank;
  int32_t id;  // the merged token
};

uint64_t pair_key(int32_t a, int32_t b) {
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
  void tokenize_word(std::string_view word, std::vector<int32_t>& out) const {
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
  void merge(std::vector<int32_t>& ids) const {
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
};

}  // namespace

// ---------------------------------------------------------------------------------------
// The tokenizer
// ---------------------------------------------------------------------------------------

struct BpeTokenizer::Impl {
  std::vector<NormStep> normalizers;
  std::vector<PreStep> pre_tokenizers;
  bool has_decoder = false;
  std::vector<DecStep> decoders;
  BpeModel model;
  std::vector<std::string> pieces;       // [vocab] id → token string ("" for unused ids)
  std::vector<bool> special;             // [vocab]
  std::vector<std::string> token_bytes;  // [vocab]
  int32_t bos = -1, eos = -1;
  bool byte_level = false;

  // Word → ids. Words repeat a lot in text, and BPE on a word costs far more than a lookup.
  // Bounded (at most ~8 MB): once full, new words are tokenized without being cached. Without
  // a pre-tokenizer the "word" is the whole text, which rarely repeats, so nothing is cached.
  static constexpr size_t kCacheCapacity = 1 << 15;
  static constexpr size_t kMaxCachedWordBytes = 64;
  mutable absl::Mutex cache_mu;
  mutable absl::flat_hash_map<std::string, std::vector<int32_t>> cache ABSL_GUARDED_BY(cache_mu);

  std::string normalize(std::string text) const {
    for (const NormStep& step : normalizers) {
      switch (step.kind) {
        case NormStep::kReplace:
          text = step.pattern.replace_all(text, step.content);
          break;
        case NormStep::kPrepend:
          if (!text.empty()) text = step.content + text;
          break;
        case NormStep::kStrip: {
          size_t b = 0, e = text.size();
          while (step.left && b < e) {
            const size_t n = char_len(text, b);
            if (!is_unicode_space(decode_char(text, b, n))) break;
            b += n;
          }
          while (step.right && e > b) {
            size_t s = e - 1;  // back up to the start of the last char
            while (s > b && (static_cast<uint8_t>(text[s]) & 0xC0) == 0x80) --s;
            if (!is_unicode_space(decode_char(text, s, e - s))) break;
            e = s;
          }
          text = text.substr(b, e - b);
          break;
        }
      }
    }
    return text;
  }

  std::vector<Piece> pre_tokenize(std::string_view text) const {
    std::vector<Piece> pieces_now;
    std::string normalized =
        normalize(is_valid_utf8(text) ? std::string(text) : sanitize_utf8(text));
    if (!normalized.empty()) pieces_now.push_back({std::move(normalized), true});
    for (const PreStep& step : pre_tokenizers) {
      std::vector<Piece> next;
      for (const Piece& p : pieces_now) apply_pre_step(step, p, next);
      pieces_now = std::move(next);
    }
    return pieces_now;
  }

  void tokenize_cached(const std::string& word, std::vector<int32_t>& out) const {
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

  std::string decode(absl::Span<const int32_t> ids) const {
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
};

namespace {

// ---------------------------------------------------------------------------------------
// tokenizer.json parsing. Every error names the JSON field path; the caller prefixes the file.
// ---------------------------------------------------------------------------------------

absl::Status field_error(const std::string& path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", problem));
}

// "path.key", or "key" at the root (path "").
std::string join_path(const std::string& path, const char* key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// obj[key], or nullptr when absent or null.
const json* member(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::string> get_string(const json& obj, const char* key, const std::string& path,
                                       const char* fallback = nullptr) {
  const json* v = member(obj, key);
  if (!v) {
    if (fallback) return std::string(fallback);
    return field_error(join_path(path, key), "missing");
  }
  if (!v->is_string()) return field_error(join_path(path, key), "expected a string");
  return v->get<std::string>();
}

absl::StatusOr<bool> get_bool(const json& obj, const char* key, const std::string& path,
                              bool fallback) {
  const json* v = member(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) return field_error(join_path(path, key), "expected true/false");
  return v->get<bool>();
}

absl::StatusOr<int64_t> get_count(const json& obj, const char* key, const std::string& path) {
  const json* v = member(obj, key);
  if (!v) return int64_t{0};
  if (!v->is_number_integer() || v->get<int64_t>() < 0) {
    return field_error(join_path(path, key), "expected a non-negative integer");
  }
  return v->get<int64_t>();
}

absl::StatusOr<std::string> get_type(const json& obj, const std::string& path) {
  if (!obj.is_object()) return field_error(path, "expected an object");
  return get_string(obj, "type", path);
}

// The elements of obj[key] (an array), with their paths.
absl::StatusOr<std::vector<std::pair<const json*, std::string>>> get_items(
    const json& obj, const char* key, const std::string& path) {
  const json* v = member(obj, key);
  const std::string p = join_path(path, key);
  if (!v || !v->is_array()) return field_error(p, "expected an array");
  std::vector<std::pair<const json*, std::string>> items;
  for (size_t i = 0; i < v->size(); ++i) items.emplace_back(&(*v)[i], absl::StrCat(p, "[", i, "]"));
  return items;
}

absl::StatusOr<Pattern> parse_pattern(const json& obj, const std::string& path) {
  const json* v = member(obj, "pattern");
  const std::string p = absl::StrCat(path, ".pattern");
  if (!v || !v->is_object()) {
    return field_error(p, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  if (const json* s = member(*v, "String"); s && s->is_string()) {
    return Pattern{s->get<std::string>(), nullptr};
  }
  if (const json* r = member(*v, "Regex"); r && r->is_string()) {
    auto rx = HfRegex::compile(r->get<std::string>());
    if (!rx.ok()) return field_error(absl::StrCat(p, ".Regex"), rx.status().message());
    return Pattern{"", *std::move(rx)};
  }
  return field_error(p, "expected {\"String\": ...} or {\"Regex\": ...}");
}

bool is_single_char(const std::string& s) {
  size_t n_chars = 0;
  for (const char c : s) n_chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80;  // lead bytes
  return n_chars == 1;
}

absl::StatusOr<PrependScheme> parse_prepend_scheme(const json& obj, const std::string& path) {
  if (const json* v = member(obj, "prepend_scheme")) {
    const std::string s = v->is_string() ? v->get<std::string>() : "";
    if (s == "first") return PrependScheme::kFirst;
    if (s == "always") return PrependScheme::kAlways;
    if (s == "never") return PrependScheme::kNever;
    return field_error(absl::StrCat(path, ".prepend_scheme"), "expected first|always|never");
  }
  // Files written before prepend_scheme existed use add_prefix_space.
  FROST_ASSIGN_OR_RETURN(const bool add, get_bool(obj, "add_prefix_space", path, true));
  return add ? PrependScheme::kAlways : PrependScheme::kNever;
}

absl::StatusOr<std::string> parse_replacement(const json& obj, const std::string& path) {
  FROST_ASSIGN_OR_RETURN(std::string r, get_string(obj, "replacement", path, "\xE2\x96\x81"));
  if (!is_single_char(r)) {
    return field_error(absl::StrCat(path, ".replacement"), "expected a single character");
  }
  return r;
}

absl::Status parse_normalizer(const json& obj, const std::string& path,
                              std::vector<NormStep>& out) {
  FROST_ASSIGN_OR_RETURN(const std::string type, get_type(obj, path));
  if (type == "Sequence") {
    FROST_ASSIGN_OR_RETURN(auto items, get_items(obj, "normalizers", path));
    for (const auto& [item, p] : items) FROST_RETURN_IF_ERROR(parse_normalizer(*item, p, out));
    return absl::OkStatus();
  }
  NormStep step{NormStep::kReplace, {}, "", false, false};
  if (type == "Replace") {
    FROST_ASSIGN_OR_RETURN(step.pattern, parse_pattern(obj, path));
    FROST_ASSIGN_OR_RETURN(step.content, get_string(obj, "content", path));
  } else if (type == "Prepend") {
    step.kind = NormStep::kPrepend;
    FROST_ASSIGN_OR_RETURN(step.content, get_string(obj, "prepend", path));
  } else if (type == "Strip") {
    step.kind = NormStep::kStrip;
    FROST_ASSIGN_OR_RETURN(step.left, get_bool(obj, "strip_left", path, true));
    FROST_ASSIGN_OR_RETURN(step.right, get_bool(obj, "strip_right", path, true));
  } else {
    // NFC/NFKC and Lowercase need Unicode tables we do not carry; BERT-style ones belong to
    // WordPiece models.
    return field_error(absl::StrCat(path, ".type"),
                       absl::StrCat("unsupported normalizer \"", type,
                                    "\" (supported: Sequence, Replace, Prepend, Strip)"));
  }
  out.push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<SplitBehavior> parse_behavior(const json& obj, const std::string& path) {
  FROST_ASSIGN_OR_RETURN(const std::string b, get_string(obj, "behavior", path, "Isolated"));
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return field_error(absl::StrCat(path, ".behavior"), absl::StrCat("unknown behavior \"", b, "\""));
}

absl::Status parse_pre_tokenizer(const json& obj, const std::string& path,
                                 std::vector<PreStep>& out) {
  FROST_ASSIGN_OR_RETURN(const std::string type, get_type(obj, path));
  if (type == "Sequence") {
    FROST_ASSIGN_OR_RETURN(auto items, get_items(obj, "pretokenizers", path));
    for (const auto& [item, p] : items) FROST_RETURN_IF_ERROR(parse_pre_tokenizer(*item, p, out));
    return absl::OkStatus();
  }
  PreStep step{PreStep::kSplit,
               {},
               SplitBehavior::kIsolated,
               false,
               "",
               PrependScheme::kAlways,
               true,
               false};
  if (type == "Split") {
    FROST_ASSIGN_OR_RETURN(step.pattern, parse_pattern(obj, path));
    FROST_ASSIGN_OR_RETURN(step.behavior, parse_behavior(obj, path));
    FROST_ASSIGN_OR_RETURN(step.invert, get_bool(obj, "invert", path, false));
  } else if (type == "Digits") {
    // HF isolates char::is_numeric chars, i.e. general category N: \p{N}.
    FROST_ASSIGN_OR_RETURN(const bool individual, get_bool(obj, "individual_digits", path, false));
    FROST_ASSIGN_OR_RETURN(auto rx, HfRegex::compile(individual ? "\\p{N}" : "\\p{N}+"));
    step.pattern = Pattern{"", std::move(rx)};
  } else if (type == "Metaspace") {
    step.kind = PreStep::kMetaspace;
    FROST_ASSIGN_OR_RETURN(step.replacement, parse_replacement(obj, path));
    FROST_ASSIGN_OR_RETURN(step.scheme, parse_prepend_scheme(obj, path));
    FROST_ASSIGN_OR_RETURN(step.split, get_bool(obj, "split", path, true));
  } else if (type == "ByteLevel") {
    step.kind = PreStep::kByteLevel;
    FROST_ASSIGN_OR_RETURN(step.add_prefix_space, get_bool(obj, "add_prefix_space", path, true));
    FROST_ASSIGN_OR_RETURN(const bool use_regex, get_bool(obj, "use_regex", path, true));
    if (use_regex) {
      // Compiled once per process (a constant pattern the tests cover, so it cannot fail).
      static const auto* gpt2 = new std::shared_ptr<const HfRegex>(*HfRegex::compile(kGpt2Pattern));
      step.pattern = Pattern{"", *gpt2};
    }
  } else {
    return field_error(
        absl::StrCat(path, ".type"),
        absl::StrCat("unsupported pre_tokenizer \"", type,
                     "\" (supported: Sequence, Split, Digits, Metaspace, ByteLevel)"));
  }
  out.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status parse_decoder(const json& obj, const std::string& path, std::vector<DecStep>& out) {
  FROST_ASSIGN_OR_RETURN(const std::string type, get_type(obj, path));
  if (type == "Sequence") {
    FROST_ASSIGN_OR_RETURN(auto items, get_items(obj, "decoders", path));
    for (const auto& [item, p] : items) FROST_RETURN_IF_ERROR(parse_decoder(*item, p, out));
    return absl::OkStatus();
  }
  DecStep step{DecStep::kReplace, {}, "", 0, 0, PrependScheme::kAlways};
  if (type == "Replace") {
    FROST_ASSIGN_OR_RETURN(step.pattern, parse_pattern(obj, path));
    FROST_ASSIGN_OR_RETURN(step.content, get_string(obj, "content", path));
  } else if (type == "ByteFallback") {
    step.kind = DecStep::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecStep::kFuse;
  } else if (type == "Strip") {
    step.kind = DecStep::kStrip;
    FROST_ASSIGN_OR_RETURN(step.content, get_string(obj, "content", path));
    if (!is_single_char(step.content)) {
      return field_error(absl::StrCat(path, ".content"), "expected a single character");
    }
    FROST_ASSIGN_OR_RETURN(const int64_t start, get_count(obj, "start", path));
    FROST_ASSIGN_OR_RETURN(const int64_t stop, get_count(obj, "stop", path));
    step.start = static_cast<size_t>(start);
    step.stop = static_cast<size_t>(stop);
  } else if (type == "Metaspace") {
    step.kind = DecStep::kMetaspace;
    FROST_ASSIGN_OR_RETURN(step.content, parse_replacement(obj, path));
    FROST_ASSIGN_OR_RETURN(step.scheme, parse_prepend_scheme(obj, path));
  } else if (type == "ByteLevel") {
    step.kind = DecStep::kByteLevel;
  } else {
    return field_error(absl::StrCat(path, ".type"),
                       absl::StrCat("unsupported decoder \"", type,
                                    "\" (supported: Sequence, Replace, ByteFallback, Fuse, Strip, "
                                    "Metaspace, ByteLevel)"));
  }
  out.push_back(std::move(step));
  return absl::OkStatus();
}

// Ids must stay small enough for dense per-id tables.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

absl::StatusOr<int32_t> parse_id(const json& v, const std::string& path) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxTokenId) {
    return field_error(path, absl::StrCat("expected a token id in [0, ", kMaxTokenId, "]"));
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

void set_piece(std::vector<std::string>& pieces, int32_t id, const std::string& s) {
  if (static_cast<size_t>(id) >= pieces.size()) pieces.resize(static_cast<size_t>(id) + 1);
  pieces[static_cast<size_t>(id)] = s;
}

absl::Status parse_model(const json& root, BpeTokenizer::Impl& impl) {
  const json* m = member(root, "model");
  if (!m || !m->is_object()) return field_error("model", "expected an object");
  // Old files may omit the type; merges then identify BPE.
  FROST_ASSIGN_OR_RETURN(const std::string type,
                         get_string(*m, "type", "model", m->contains("merges") ? "BPE" : ""));
  if (type != "BPE") {
    return field_error("model.type", absl::StrCat("unsupported model \"", type, "\" (only BPE)"));
  }
  // dropout 0 changes nothing, so only a positive one is unsupported.
  if (const json* d = member(*m, "dropout"); d && !(d->is_number() && d->get<double>() == 0.0)) {
    return field_error("model.dropout", "BPE dropout is not supported (expected null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = member(*m, key); v && !(v->is_string() && v->get<std::string>().empty())) {
      return field_error(absl::StrCat("model.", key), "not supported (expected null)");
    }
  }
  BpeModel& model = impl.model;
  FROST_ASSIGN_OR_RETURN(model.fuse_unk, get_bool(*m, "fuse_unk", "model", false));
  FROST_ASSIGN_OR_RETURN(model.byte_fallback, get_bool(*m, "byte_fallback", "model", false));
  FROST_ASSIGN_OR_RETURN(model.ignore_merges, get_bool(*m, "ignore_merges", "model", false));

  const json* vocab = member(*m, "vocab");
  if (!vocab || !vocab->is_object()) return field_error("model.vocab", "expected an object");
  model.vocab.reserve(vocab->size());
  for (const auto& [token, v] : vocab->items()) {
    FROST_ASSIGN_OR_RETURN(const int32_t id,
                           parse_id(v, absl::StrCat("model.vocab[\"", token, "\"]")));
    model.vocab[token] = id;
    set_piece(impl.pieces, id, token);
  }
  model.byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    model.byte_ids[static_cast<size_t>(b)] = model.lookup(name);
  }
  if (const json* unk = member(*m, "unk_token")) {
    const int32_t id = unk->is_string() ? model.lookup(unk->get<std::string>()) : -1;
    if (id < 0) return field_error("model.unk_token", "not a token of model.vocab");
    model.unk_id = id;
  }

  // Merges: "left right" strings (older files) or ["left", "right"] pairs (tokens may then
  // contain spaces). Rank = position. A repeated pair keeps its last rank, as HF's map does.
  FROST_ASSIGN_OR_RETURN(auto merges, get_items(*m, "merges", "model"));
  model.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [item, p] = merges[rank];
    std::string left, right;
    if (item->is_string()) {
      const std::string s = item->get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return field_error(p, absl::StrCat("\"", s, "\": expected \"left right\""));
      }
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (item->is_array() && item->size() == 2 && (*item)[0].is_string() &&
               (*item)[1].is_string()) {
      left = (*item)[0].get<std::string>();
      right = (*item)[1].get<std::string>();
    } else {
      return field_error(p, "expected \"left right\" or [\"left\", \"right\"]");
    }
    const int32_t a = model.lookup(left), b = model.lookup(right), ab = model.lookup(left + right);
    if (a < 0 || b < 0 || ab < 0) {
      return field_error(p, absl::StrCat("token \"",
                                         a < 0   ? left
                                         : b < 0 ? right
                                                 : left + right,
                                         "\" is not in model.vocab"));
    }
    model.merges[pair_key(a, b)] = Merge{static_cast<int32_t>(rank), ab};
  }
  return absl::OkStatus();
}

// bos from the post_processor: the first special token a template puts before $A.
absl::StatusOr<int32_t> parse_post_processor_bos(const json& obj, const std::string& path,
                                                 const BpeTokenizer::Impl& impl) {
  FROST_ASSIGN_OR_RETURN(const std::string type, get_type(obj, path));
  if (type == "Sequence") {
    FROST_ASSIGN_OR_RETURN(auto items, get_items(obj, "processors", path));
    for (const auto& [item, p] : items) {
      FROST_ASSIGN_OR_RETURN(const int32_t bos, parse_post_processor_bos(*item, p, impl));
      if (bos >= 0) return bos;
    }
    return -1;
  }
  if (type == "ByteLevel") return -1;  // offsets only
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const json* cls = member(obj, "cls");
    if (!cls || !cls->is_array() || cls->size() != 2) {
      return field_error(absl::StrCat(path, ".cls"), "expected [token, id]");
    }
    return parse_id((*cls)[1], absl::StrCat(path, ".cls[1]"));
  }
  if (type != "TemplateProcessing") {
    return field_error(absl::StrCat(path, ".type"),
                       absl::StrCat("unsupported post_processor \"", type, "\""));
  }
  FROST_ASSIGN_OR_RETURN(auto single, get_items(obj, "single", path));
  for (const auto& [item, p] : single) {
    if (!item->is_object()) return field_error(p, "expected an object");
    if (item->contains("Sequence")) return -1;  // reached $A without a special token
    const json* st = member(*item, "SpecialToken");
    if (!st || !st->is_object()) continue;
    FROST_ASSIGN_OR_RETURN(const std::string name, get_string(*st, "id", p + ".SpecialToken"));
    // The id list lives in special_tokens; fall back to the vocabulary spelling.
    const json* specials = member(obj, "special_tokens");
    const json* entry =
        specials && specials->is_object() ? member(*specials, name.c_str()) : nullptr;
    const json* ids = entry && entry->is_object() ? member(*entry, "ids") : nullptr;
    if (ids && ids->is_array() && !ids->empty()) {
      return parse_id((*ids)[0], absl::StrCat(path, ".special_tokens[\"", name, "\"].ids[0]"));
    }
    for (size_t id = 0; id < impl.pieces.size(); ++id) {
      if (impl.pieces[id] == name) return static_cast<int32_t>(id);
    }
    return field_error(p, absl::StrCat("special token \"", name, "\" has no id"));
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer::Impl>> parse_json(const json& root) {
  if (!root.is_object()) return field_error("(root)", "expected a JSON object");
  auto impl = std::make_unique<BpeTokenizer::Impl>();
  FROST_RETURN_IF_ERROR(parse_model(root, *impl));

  // Added tokens extend the id space; "special" ones are skipped by decode.
  std::vector<std::pair<std::string, int32_t>> added_special;
  if (member(root, "added_tokens")) {
    FROST_ASSIGN_OR_RETURN(auto added, get_items(root, "added_tokens", ""));
    for (const auto& [item, p] : added) {
      if (!item->is_object()) return field_error(p, "expected an object");
      const json* idv = member(*item, "id");
      if (!idv) return field_error(p + ".id", "missing");
      FROST_ASSIGN_OR_RETURN(const int32_t id, parse_id(*idv, p + ".id"));
      FROST_ASSIGN_OR_RETURN(const std::string content, get_string(*item, "content", p));
      FROST_ASSIGN_OR_RETURN(const bool special, get_bool(*item, "special", p, false));
      set_piece(impl->pieces, id, content);
      if (special) added_special.emplace_back(content, id);
    }
  }
  impl->special.assign(impl->pieces.size(), false);
  for (const auto& [content, id] : added_special) impl->special[static_cast<size_t>(id)] = true;
  if (impl->model.unk_id >= 0) impl->special[static_cast<size_t>(impl->model.unk_id)] = true;

  if (const json* n = member(root, "normalizer")) {
    FROST_RETURN_IF_ERROR(parse_normalizer(*n, "normalizer", impl->normalizers));
  }
  if (const json* p = member(root, "pre_tokenizer")) {
    FROST_RETURN_IF_ERROR(parse_pre_tokenizer(*p, "pre_tokenizer", impl->pre_tokenizers));
  }
  if (const json* d = member(root, "decoder")) {
    impl->has_decoder = true;
    FROST_RETURN_IF_ERROR(parse_decoder(*d, "decoder", impl->decoders));
  }
  for (const PreStep& s : impl->pre_tokenizers) impl->byte_level |= s.kind == PreStep::kByteLevel;
  for (const DecStep& s : impl->decoders) impl->byte_level |= s.kind == DecStep::kByteLevel;

  if (const json* pp = member(root, "post_processor")) {
    FROST_ASSIGN_OR_RETURN(impl->bos, parse_post_processor_bos(*pp, "post_processor", *impl));
  }
  auto find_special = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) {
      for (const auto& [content, id] : added_special) {
        if (content == name) return id;
      }
    }
    return int32_t{-1};
  };
  if (impl->bos < 0) {
    impl->bos = find_special({"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"});
  }
  impl->eos = find_special({"</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>"});
  if (static_cast<size_t>(impl->bos + 1) > impl->pieces.size()) {
    return field_error("post_processor",
                       absl::StrCat("bos id ", impl->bos, " is outside the vocabulary"));
  }

  // What each token adds to a generated stream, computed once.
  impl->token_bytes.resize(impl->pieces.size());
  for (size_t id = 0; id < impl->pieces.size(); ++id) {
    if (impl->special[id] || impl->pieces[id].empty()) continue;
    std::vector<std::string> one{impl->pieces[id]};
    run_decoders(impl->decoders, one, /*stream=*/true);
    impl->token_bytes[id] = absl::StrJoin(one, "");
  }
  return impl;
}

}  // namespace

BpeTokenizer::BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::parse(std::string_view json_text,
                                                                  const std::string& source) {
  // nlohmann throws on malformed input; nothing may escape this boundary.
  absl::StatusOr<std::unique_ptr<Impl>> impl;
  try {
    const json root = json::parse(json_text.begin(), json_text.end());
    impl = parse_json(root);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": malformed JSON: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  if (!impl.ok()) {
    return absl::Status(impl.status().code(), absl::StrCat(source, ": ", impl.status().message()));
  }
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(*std::move(impl)));
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": tokenizer.json not found or unreadable"));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  return parse(buf.str(), path);
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::encode(std::string_view text,
                                                          bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && impl_->bos >= 0) ids.push_back(impl_->bos);
  for (const Piece& p : impl_->pre_tokenize(text)) impl_->tokenize_cached(p.text, ids);
  return ids;
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  for (Piece& p : impl_->pre_tokenize(text)) words.push_back(std::move(p.text));
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
