#include "core/constrain/gbnf.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/common/utf8.h"

namespace frost::constrain {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class GbnfParser {
 public:
  GbnfParser(absl::string_view text, const CompileLimits& limits, const CompileControl& control)
      : text_(text), b_(limits, control) {}

  absl::StatusOr<std::shared_ptr<const Grammar>> parse() {
    auto g = parse_definitions();
    // Builder statuses (size limits, the CompileControl) carry no prefix; the parser's own errors do.
    if (!g.ok() && !b_.status().ok()) {
      return absl::Status(b_.status().code(), absl::StrCat("grammar: ", b_.status().message()));
    }
    return g;
  }

 private:
  absl::StatusOr<std::shared_ptr<const Grammar>> parse_definitions() {
    skip_space();
    while (pos_ < text_.size()) {
      const size_t name_pos = pos_;
      const absl::string_view name = parse_name();
      if (name.empty()) return error("expected a rule name", pos_);
      skip_space();
      if (text_.substr(pos_, 3) != "::=") return error("expected '::=' after rule name", pos_);
      pos_ += 3;
      const uint32_t rule = b_.rule_named(name);
      // Helper rules are named "<rule>:<what>"; ':' cannot appear in a GBNF name, so they never collide.
      current_ = std::string(name);
      if (!defined_.emplace(std::string(name), name_pos).second) {
        return error(absl::StrCat("rule '", name, "' defined twice"), name_pos);
      }
      auto alts = parse_body();
      if (!alts.ok()) return alts.status();
      for (Seq& s : *alts) b_.add_alternative(rule, std::move(s));
      skip_space();
    }
    // Report the undefined reference that comes first in the text.
    const std::pair<const std::string, size_t>* undefined = nullptr;
    for (const auto& entry : referenced_) {
      if (!defined_.contains(entry.first) && (undefined == nullptr || entry.second < undefined->second)) {
        undefined = &entry;
      }
    }
    if (undefined != nullptr) {
      return error(absl::StrCat("undefined rule '", undefined->first, "'"), undefined->second);
    }
    if (!defined_.contains("root")) return absl::InvalidArgumentError("grammar: missing rule 'root'");
    auto g = b_.build(b_.rule_named("root"));
    if (!g.ok()) return absl::Status(g.status().code(), absl::StrCat("grammar: ", g.status().message()));
    return g;
  }

  absl::Status error(absl::string_view what, size_t at) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("grammar: ", what, " at line ", line, ", column ", col));
  }

  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  absl::string_view parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // True when the text at pos_ is `name ::=` — the start of the next definition.
  bool at_definition() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  // The alternatives of one definition, up to the next `name ::=` or the end. Iterative: one frame per open
  // parenthesis (an explicit stack, so nesting costs heap, not C++ stack), refused past max_nesting.
  absl::StatusOr<std::vector<Seq>> parse_body() {
    struct Frame {
      std::vector<Seq> alts;
      Seq seq;
      size_t open = 0;  // position of the '('
    };
    std::vector<Frame> frames(1);
    while (true) {
      if (!b_.tick().ok()) return b_.status();
      skip_space();
      if (pos_ >= text_.size()) break;
      const char c = text_[pos_];
      if (c == '|') {
        frames.back().alts.push_back(std::move(frames.back().seq));
        frames.back().seq.clear();
        ++pos_;
        continue;
      }
      if (c == ')') {
        if (frames.size() == 1) break;  // the definition ends; the caller reports the stray ')'
        Frame f = std::move(frames.back());
        frames.pop_back();
        f.alts.push_back(std::move(f.seq));
        ++pos_;
        const Seq group = {GrammarBuilder::ref(b_.group(std::move(f.alts), current_ + ":group"))};
        auto rep = parse_postfix(group, f.open);
        if (!rep.ok()) return rep.status();
        frames.back().seq.insert(frames.back().seq.end(), rep->begin(), rep->end());
        continue;
      }
      if (frames.size() == 1 && at_definition()) break;
      if (c == '(') {
        if (static_cast<int64_t>(frames.size()) > b_.limits().max_nesting) {
          return error(absl::StrCat("parentheses nest deeper than ", b_.limits().max_nesting, " (max_nesting)"), pos_);
        }
        frames.emplace_back();
        frames.back().open = pos_++;
        continue;
      }
      const size_t start = pos_;
      auto unit = parse_element();
      if (!unit.ok()) return unit.status();
      auto rep = parse_postfix(*unit, start);
      if (!rep.ok()) return rep.status();
      frames.back().seq.insert(frames.back().seq.end(), rep->begin(), rep->end());
    }
    if (frames.size() > 1) return error("expected ')'", pos_);
    frames[0].alts.push_back(std::move(frames[0].seq));
    return std::move(frames[0].alts);
  }

  // One element other than a parenthesised group.
  absl::StatusOr<Seq> parse_element() {
    const size_t start = pos_;
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      Seq seq;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        auto cp = parse_char();
        if (!cp.ok()) return cp.status();
        std::string utf8;
        append_utf8(utf8, *cp);
        GrammarBuilder::append_literal(seq, utf8);
      }
      if (pos_ >= text_.size()) return error("unterminated literal", start);
      ++pos_;
      return seq;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return Seq{b_.codepoints({{0, 0x10FFFF}})};
    }
    const absl::string_view name = parse_name();
    if (name.empty()) {
      return error(absl::StrCat("unexpected character '", std::string(1, c), "'"), start);
    }
    referenced_.emplace(std::string(name), start);
    return Seq{GrammarBuilder::ref(b_.rule_named(name))};
  }

  absl::StatusOr<Seq> parse_class() {
    const size_t start = pos_++;
    bool negated = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    CodepointRanges ranges;
    while (pos_ < text_.size() && text_[pos_] != ']') {
      auto lo = parse_char();
      if (!lo.ok()) return lo.status();
      char32_t hi = *lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        auto end = parse_char();
        if (!end.ok()) return end.status();
        hi = *end;
        if (hi < *lo) return error("character range out of order", start);
      }
      ranges.emplace_back(*lo, hi);
    }
    if (pos_ >= text_.size()) return error("unterminated character class", start);
    ++pos_;
    normalize_ranges(ranges);
    if (negated) ranges = complement_ranges(ranges);
    return Seq{b_.codepoints(std::move(ranges))};
  }

  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  absl::StatusOr<char32_t> parse_char() {
    const size_t start = pos_;
    if (text_[pos_] != '\\') {
      char32_t cp = 0;
      if (!decode_utf8(text_, &pos_, &cp)) return error("invalid UTF-8", start);
      return cp;
    }
    if (++pos_ >= text_.size()) return error("unterminated escape", start);
    const char e = text_[pos_++];
    switch (e) {
      case 'n': return U'\n';
      case 'r': return U'\r';
      case 't': return U'\t';
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^':
        return static_cast<char32_t>(e);
      case 'x': case 'u': case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          const int h = pos_ < text_.size() ? hex_value(text_[pos_]) : -1;
          if (h < 0) return error(absl::StrCat("expected ", digits, " hex digits after \\", std::string(1, e)), start);
          v = v * 16 + static_cast<char32_t>(h);
          ++pos_;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return error("escape is not a valid code point", start);
        return v;
      }
      default:
        return error(absl::StrCat("unknown escape '\\", std::string(1, e), "'"), start);
    }
  }

  absl::StatusOr<int64_t> parse_int() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > (int64_t{1} << 40)) return error("repetition bound too large", start);
    }
    if (pos_ == start) return error("expected a number", start);
    return v;
  }

  absl::StatusOr<Seq> parse_postfix(const Seq& unit, size_t start) {
    if (pos_ >= text_.size()) return unit;
    const char c = text_[pos_];
    int64_t min = 0, max = -1;
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_;
      min = 1;
    } else if (c == '?') {
      ++pos_;
      max = 1;
    } else if (c == '{') {
      const size_t brace = pos_++;
      skip_space();
      auto lo = parse_int();
      if (!lo.ok()) return lo.status();
      min = max = *lo;
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        skip_space();
        max = -1;
        if (pos_ < text_.size() && text_[pos_] != '}') {
          auto hi = parse_int();
          if (!hi.ok()) return hi.status();
          max = *hi;
        }
        skip_space();
      }
      if (pos_ >= text_.size() || text_[pos_] != '}') return error("expected '}'", pos_);
      ++pos_;
      if (max >= 0 && max < min) return error("repetition {m,n} with n < m", brace);
    } else {
      return unit;
    }
    auto rep = b_.repeat(unit, min, max, current_ + ":repeat");
    if (!rep.ok()) return error(rep.status().message(), start);
    return Seq{*rep};
  }

  absl::string_view text_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::string current_;
  absl::flat_hash_map<std::string, size_t> defined_;
  absl::flat_hash_map<std::string, size_t> referenced_;  // first reference of each name
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> parse_gbnf(absl::string_view text, const CompileLimits& limits,
                                                          const CompileControl& control) {
  if (static_cast<int64_t>(text.size()) > limits.max_text_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: text of ", text.size(),
                                                   " bytes exceeds max_text_bytes ", limits.max_text_bytes));
  }
  return GbnfParser(text, limits, control).parse();
}

}  // namespace frost::constrain
