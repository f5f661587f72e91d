// Regexes for tokenizer.json on RE2 (with the GPT-2 `\s+(?!\S)` lookahead emulated), the
// Pattern matcher built on them, and the pre-tokenizer stages (Split, Metaspace, ByteLevel).
// Shared declarations are in tokenizer_bpe_internal.h.
#include <re2/re2.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/model/tokenizer_bpe_internal.h"

namespace frost {
namespace bpe_internal {
namespace {

// ---------------------------------------------------------------------------------------
// Regexes: Oniguruma syntax (what tokenizer.json patterns are written for) run on RE2
// ---------------------------------------------------------------------------------------

// The Unicode White_Space set of is_unicode_space as an RE2 class body (RE2's \s is
// ASCII-only, so we spell this set out).
constexpr char kSpaceClassBody[] =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
constexpr char kWordClassBody[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";  // Oniguruma's Unicode \w

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

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

}  // namespace

absl::StatusOr<std::shared_ptr<const HfRegex>> HfRegex::compile(const std::string& pattern) {
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

HfRegex::~HfRegex() = default;

bool HfRegex::find(std::string_view text, size_t pos, size_t* b, size_t* e) const {
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

absl::StatusOr<std::unique_ptr<RE2>> HfRegex::make_re2(const std::string& pattern) {
  RE2::Options opts;
  opts.set_log_errors(false);
  auto re = std::make_unique<RE2>(pattern, opts);
  if (!re->ok()) {
    return absl::InvalidArgumentError(absl::StrCat("regex rejected by RE2: ", re->error()));
  }
  return re;
}

bool HfRegex::match_exact_at(std::string_view text, size_t p, size_t* e) const {
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

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
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

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
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

// ---------------------------------------------------------------------------------------
// Pre-tokenizers
// ---------------------------------------------------------------------------------------

namespace {

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

}  // namespace

void apply_pre_tokenizer_stage(const PreTokenizerStage& stage, const Piece& piece, std::vector<Piece>& out) {
  switch (stage.kind) {
    case PreTokenizerStage::kSplit:
      push_spans(piece, piece.text, split_spans(piece.text, stage.pattern, stage.behavior, stage.invert),
                 out);
      return;
    case PreTokenizerStage::kMetaspace: {
      Pattern space{" ", nullptr};
      std::string t = space.replace_all(piece.text, stage.replacement);
      const bool prepend =
          stage.scheme == PrependScheme::kAlways || (stage.scheme == PrependScheme::kFirst && piece.at_start);
      // Like HF's NormalizedString::prepend, nothing is prepended to an empty string.
      if (prepend && !t.empty() && !starts_with(t, stage.replacement)) t = stage.replacement + t;
      if (!stage.split) {
        if (!t.empty()) out.push_back({std::move(t), piece.at_start});
        return;
      }
      const Pattern delim{stage.replacement, nullptr};
      push_spans(piece, t, split_spans(t, delim, SplitBehavior::kMergedWithNext, false), out);
      return;
    }
    case PreTokenizerStage::kByteLevel: {
      std::string t = piece.text;
      if (stage.add_prefix_space && !t.empty() && t[0] != ' ') t.insert(t.begin(), ' ');
      std::vector<Piece> words;
      if (stage.pattern.regex) {
        push_spans(piece, t, split_spans(t, stage.pattern, SplitBehavior::kIsolated, false), words);
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

}  // namespace bpe_internal
}  // namespace frost
