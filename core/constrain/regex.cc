#include "core/constrain/regex.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/utf8.h"

namespace frost::constrain {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

CodepointRanges intersect(const CodepointRanges& a, const CodepointRanges& b) {
  CodepointRanges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const char32_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.emplace_back(lo, hi);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

bool contains(const CodepointRanges& r, char32_t cp) {
  for (const auto& [lo, hi] : r) {
    if (cp >= lo && cp <= hi) return true;
  }
  return false;
}

// The escape JSON requires for `cp` inside a string, or "" when it may appear raw.
std::string json_escape(char32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: return cp < 0x20 ? absl::StrFormat("\\u%04x", static_cast<uint32_t>(cp)) : "";
  }
}

const CodepointRanges kDigit = {{'0', '9'}};
const CodepointRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodepointRanges kSpace = {{'\t', '\r'}, {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                                {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, absl::string_view p, const RegexOptions& o) : b_(b), p_(p), opt_(o) {}

  // Iterative: one frame per open group (an explicit stack, so nesting costs heap, not C++ stack), and
  // nesting past limits.max_nesting is refused at the '(' that passes it.
  absl::StatusOr<uint32_t> parse() {
    struct Frame {
      std::vector<Seq> alts;
      Seq seq;
      size_t open = 0;  // position of the '('
    };
    std::vector<Frame> frames(1);
    if (!p_.empty() && p_[0] == '^') ++pos_;
    while (pos_ < p_.size()) {
      if (!b_.tick().ok()) return b_.status();
      const char c = p_[pos_];
      if (c == '|') {
        frames.back().alts.push_back(std::move(frames.back().seq));
        frames.back().seq.clear();
        ++pos_;
        continue;
      }
      if (c == ')') {
        if (frames.size() == 1) return error("unmatched ')'", pos_);
        Frame f = std::move(frames.back());
        frames.pop_back();
        f.alts.push_back(std::move(f.seq));
        ++pos_;
        const Seq group = {GrammarBuilder::ref(b_.group(std::move(f.alts), "regex:group"))};
        auto rep = parse_quantifier(group, f.open);
        if (!rep.ok()) return rep.status();
        frames.back().seq.insert(frames.back().seq.end(), rep->begin(), rep->end());
        continue;
      }
      if (c == '(') {
        const size_t open = pos_;
        if (absl::Status st = parse_group_open(); !st.ok()) return st;
        if (static_cast<int64_t>(frames.size()) > b_.limits().max_nesting) {
          return error(absl::StrCat("groups nest deeper than ", b_.limits().max_nesting, " (max_nesting)"), open);
        }
        frames.emplace_back();
        frames.back().open = open;
        continue;
      }
      const size_t start = pos_;
      auto atom = parse_atom();
      if (!atom.ok()) return atom.status();
      auto rep = parse_quantifier(*atom, start);
      if (!rep.ok()) return rep.status();
      frames.back().seq.insert(frames.back().seq.end(), rep->begin(), rep->end());
    }
    if (frames.size() > 1) return error("missing ')'", frames.back().open);
    frames[0].alts.push_back(std::move(frames[0].seq));
    return b_.group(std::move(frames[0].alts), "regex");
  }

 private:
  absl::Status error(absl::string_view what, size_t at) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: ", what, " at position ", at));
  }
  absl::Status unsupported(absl::string_view what, size_t at) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: unsupported ", what, " at position ", at));
  }
  bool at(char c) const { return pos_ < p_.size() && p_[pos_] == c; }

  // One atom other than a group.
  absl::StatusOr<Seq> parse_atom() {
    const size_t start = pos_;
    const char c = p_[pos_];
    switch (c) {
      case '[': return parse_class();
      case '.':
        ++pos_;
        return lower_set(complement_ranges({{'\n', '\n'}}));
      case '^':
        return unsupported("anchor '^' (only allowed at the start)", start);
      case '$':
        if (pos_ + 1 == p_.size()) {
          ++pos_;
          return Seq{};
        }
        return unsupported("anchor '$' (only allowed at the end)", start);
      case '*': case '+': case '?':
        return error("nothing to repeat", start);
      case '{':
        if (quantifier_ahead()) return error("nothing to repeat", start);
        ++pos_;
        return lower_char('{');
      case '\\': {
        auto set = parse_escape(/*in_class=*/false);
        if (!set.ok()) return set.status();
        return lower_set(std::move(*set));
      }
      default: {
        char32_t cp = 0;
        if (!decode_utf8(p_, &pos_, &cp)) return error("invalid UTF-8", start);
        return lower_char(cp);
      }
    }
  }

  // The opening of a group at pos_: '(' and its (?: / (?<name> / (?P<name> header.
  absl::Status parse_group_open() {
    const size_t start = pos_++;
    if (!at('?')) return absl::OkStatus();
    const absl::string_view rest = p_.substr(pos_);
    if (rest.substr(0, 2) == "?:") {
      pos_ += 2;
    } else if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!") {
      return unsupported("lookahead", start);
    } else if (rest.substr(0, 3) == "?<=" || rest.substr(0, 3) == "?<!") {
      return unsupported("lookbehind", start);
    } else if (rest.substr(0, 2) == "?<" || rest.substr(0, 3) == "?P<") {
      const size_t close = p_.find('>', pos_);
      if (close == absl::string_view::npos) return error("unterminated group name", start);
      pos_ = close + 1;
    } else {
      return unsupported("group syntax '(?'", start);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Seq> parse_class() {
    const size_t start = pos_++;
    bool negated = false;
    if (at('^')) {
      negated = true;
      ++pos_;
    }
    CodepointRanges ranges;
    while (pos_ < p_.size() && !at(']')) {
      const size_t item = pos_;
      auto lo = parse_class_atom();
      if (!lo.ok()) return lo.status();
      const bool single = lo->size() == 1 && (*lo)[0].first == (*lo)[0].second;
      if (single && at('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        auto hi = parse_class_atom();
        if (!hi.ok()) return hi.status();
        if (hi->size() != 1 || (*hi)[0].first != (*hi)[0].second) return error("invalid class range", item);
        if ((*hi)[0].first < (*lo)[0].first) return error("class range out of order", item);
        ranges.emplace_back((*lo)[0].first, (*hi)[0].first);
      } else {
        ranges.insert(ranges.end(), lo->begin(), lo->end());
      }
    }
    if (!at(']')) return error("missing ']'", start);
    ++pos_;
    normalize_ranges(ranges);
    if (negated) ranges = complement_ranges(ranges);
    return lower_set(std::move(ranges));
  }

  absl::StatusOr<CodepointRanges> parse_class_atom() {
    const size_t start = pos_;
    if (at('\\')) return parse_escape(/*in_class=*/true);
    char32_t cp = 0;
    if (!decode_utf8(p_, &pos_, &cp)) return error("invalid UTF-8", start);
    return CodepointRanges{{cp, cp}};
  }

  // An escape at pos_ (the backslash) as the set of characters it matches.
  absl::StatusOr<CodepointRanges> parse_escape(bool in_class) {
    const size_t start = pos_++;
    if (pos_ >= p_.size()) return error("trailing backslash", start);
    const char e = p_[pos_++];
    auto one = [](char32_t cp) { return CodepointRanges{{cp, cp}}; };
    switch (e) {
      case 'd': return kDigit;
      case 'w': return kWord;
      case 's': return kSpace;
      case 'D': return complement_ranges(kDigit);
      case 'W': return complement_ranges(kWord);
      case 'S': return complement_ranges(kSpace);
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'b':
        if (in_class) return one('\b');
        return unsupported("word boundary '\\b'", start);
      case 'B': return unsupported("word boundary '\\B'", start);
      case 'x': case 'u': {
        const int digits = e == 'x' ? 2 : 4;
        char32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          const int h = pos_ < p_.size() ? hex_value(p_[pos_]) : -1;
          if (h < 0) return error(absl::StrCat("expected ", digits, " hex digits after \\", std::string(1, e)), start);
          v = v * 16 + static_cast<char32_t>(h);
          ++pos_;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return unsupported("surrogate escape", start);
        return one(v);
      }
      default:
        break;
    }
    if (e >= '1' && e <= '9') return unsupported("backreference", start);
    const bool alnum = (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9');
    if (alnum || static_cast<uint8_t>(e) >= 0x80) {
      return unsupported(absl::StrCat("escape '\\", std::string(1, e), "'"), start);
    }
    return one(static_cast<char32_t>(e));  // escaped punctuation is literal
  }

  // True when a valid {n}, {n,}, {n,m} or {,m} starts at pos_.
  bool quantifier_ahead(int64_t* min = nullptr, int64_t* max = nullptr, size_t* end = nullptr) const {
    size_t p = pos_ + 1;
    auto number = [&](int64_t* v) {
      const size_t s = p;
      *v = 0;
      while (p < p_.size() && p_[p] >= '0' && p_[p] <= '9') {
        *v = std::min<int64_t>(*v * 10 + (p_[p] - '0'), int64_t{1} << 40);
        ++p;
      }
      return p > s;
    };
    int64_t lo = 0, hi = -1;
    const bool has_lo = number(&lo);
    if (p < p_.size() && p_[p] == ',') {
      ++p;
      if (!number(&hi)) hi = -1;
      if (!has_lo && hi < 0) return false;
    } else {
      if (!has_lo) return false;
      hi = lo;
    }
    if (p >= p_.size() || p_[p] != '}') return false;
    if (min != nullptr) *min = lo;
    if (max != nullptr) *max = hi;
    if (end != nullptr) *end = p + 1;
    return true;
  }

  absl::StatusOr<Seq> parse_quantifier(const Seq& atom, size_t start) {
    int64_t min = 0, max = -1;
    const size_t qpos = pos_;
    if (at('*')) {
      ++pos_;
    } else if (at('+')) {
      min = 1;
      ++pos_;
    } else if (at('?')) {
      max = 1;
      ++pos_;
    } else if (at('{') && quantifier_ahead(&min, &max, &pos_)) {
      if (max >= 0 && max < min) return error("quantifier {n,m} with m < n", qpos);
    } else {
      return atom;
    }
    if (at('?')) {
      ++pos_;  // lazy: same language as greedy
    } else if (at('+')) {
      return unsupported("possessive quantifier", pos_);
    }
    if (at('*') || at('+') || at('?') || (at('{') && quantifier_ahead())) return error("nothing to repeat", pos_);
    auto rep = b_.repeat(atom, min, max, "regex:repeat");
    if (!rep.ok()) return error(rep.status().message(), start);
    return Seq{*rep};
  }

  Seq lower_char(char32_t cp) {
    Seq seq;
    std::string bytes = opt_.json_string ? json_escape(cp) : "";
    if (bytes.empty()) append_utf8(bytes, cp);
    GrammarBuilder::append_literal(seq, bytes);
    return seq;
  }

  // One character out of `ranges`; in JSON-string mode the characters JSON must escape become their
  // escape sequences, as separate alternatives.
  Seq lower_set(CodepointRanges ranges) {
    normalize_ranges(ranges);
    if (!opt_.json_string) return {b_.codepoints(std::move(ranges))};
    std::string key;
    for (const auto& [lo, hi] : ranges) absl::StrAppend(&key, uint32_t(lo), "-", uint32_t(hi), ",");
    if (auto it = json_sets_.find(key); it != json_sets_.end()) return it->second;
    const CodepointRanges plain = intersect(ranges, {{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0x10FFFF}});
    std::vector<Seq> alts;
    if (!plain.empty()) alts.push_back({b_.codepoints(plain)});
    // The escape sequences as one trie: they all start with a backslash, so a class like `.` adds one
    // live parse for its escapes, not one per escapable character (33 for `.`).
    std::vector<std::string> escapes;
    for (char32_t cp : std::vector<char32_t>{'"', '\\'}) {
      if (contains(ranges, cp)) escapes.push_back(json_escape(cp));
    }
    for (char32_t cp = 0; cp < 0x20; ++cp) {
      if (contains(ranges, cp)) escapes.push_back(json_escape(cp));
    }
    if (!escapes.empty()) alts.push_back(b_.literal_trie(std::move(escapes), "regex:json-escape"));
    Seq out;
    if (alts.empty()) {
      out = {GrammarBuilder::bytes(ByteSet())};
    } else if (alts.size() == 1) {
      out = alts[0];
    } else {
      out = {GrammarBuilder::ref(b_.group(std::move(alts), "regex:json-char"))};
    }
    json_sets_[key] = out;
    return out;
  }

  GrammarBuilder& b_;
  absl::string_view p_;
  RegexOptions opt_;
  size_t pos_ = 0;
  absl::flat_hash_map<std::string, Seq> json_sets_;
};

}  // namespace

absl::StatusOr<uint32_t> add_regex(GrammarBuilder& builder, absl::string_view pattern, const RegexOptions& options) {
  auto rule = RegexParser(builder, pattern, options).parse();
  if (!rule.ok()) return rule.status();
  if (!builder.status().ok()) return builder.status();
  return rule;
}

absl::StatusOr<std::shared_ptr<const Grammar>> compile_regex(absl::string_view pattern, const CompileLimits& limits,
                                                             const CompileControl& control) {
  if (static_cast<int64_t>(pattern.size()) > limits.max_text_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("regex: pattern of ", pattern.size(),
                                                   " bytes exceeds max_text_bytes ", limits.max_text_bytes));
  }
  GrammarBuilder b(limits, control);
  const uint32_t root = b.add_rule("root");
  auto body = add_regex(b, pattern, RegexOptions{});
  // Builder statuses (size limits, the CompileControl) carry no prefix; the parser's own errors do.
  if (!b.status().ok()) return absl::Status(b.status().code(), absl::StrCat("regex: ", b.status().message()));
  if (!body.ok()) return body.status();
  b.add_alternative(root, {GrammarBuilder::ref(*body)});
  auto g = b.build(root);
  if (!g.ok()) return absl::Status(g.status().code(), absl::StrCat("regex: ", g.status().message()));
  return g;
}

}  // namespace frost::constrain
