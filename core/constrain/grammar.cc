#include "core/constrain/grammar.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frost::constrain {
namespace {

constexpr char32_t kMaxCodepoint = 0x10FFFF;
// A class whose DFA would need more states than this is lowered to alternatives of byte sequences instead
// (only classes of thousands of scattered ranges get there).
constexpr size_t kMaxClassStates = 4096;
// What one DFA state counts for against max_elements (it holds 256 transitions).
constexpr int64_t kElementsPerClassState = 32;

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] into runs whose UTF-8 encodings have the same length and where every byte position is
// a contiguous byte range (the construction of RE2's and Rust regex-syntax's UTF-8 compilers). Surrogates
// are cut out: they have no valid UTF-8 encoding.
void utf8_sequences(char32_t lo, char32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
    return;
  }
  for (char32_t m : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
    if (lo <= m && m < hi) {
      utf8_sequences(lo, m, out);
      utf8_sequences(m + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [](char32_t cp) {
    std::string s;
    if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    }
    s += static_cast<char>(0x80 | (cp & 0x3F));
    return s;
  };
  const std::string a = encode(lo), b = encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t k = 0; k < a.size(); ++k) seq.emplace_back(uint8_t(a[k]), uint8_t(b[k]));
  out.push_back(std::move(seq));
}

ByteSet byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(b);
  return s;
}

// The DFA of one UTF-8 character out of `seqs` (byte-range sequences that partition the class): subset
// construction over (sequence, position) items, then states with equal futures merged (the DFA is
// acyclic: states are merged from the last byte of a character backwards). False when it would need more
// than kMaxClassStates states.
bool make_class(const std::vector<ByteRanges>& seqs, CharClass* out) {
  // Each state looks at 256 bytes times its items: past this many sequences (thousands of scattered
  // ranges) the alternatives lowering, linear in the sequences, is the cheaper one.
  if (seqs.size() > kMaxClassStates) return false;
  using Item = std::pair<uint32_t, uint8_t>;  // (sequence, bytes matched)
  std::vector<std::vector<Item>> sets;
  absl::flat_hash_map<std::vector<Item>, uint32_t> ids;
  std::vector<Item> start;
  for (uint32_t i = 0; i < seqs.size(); ++i) start.push_back({i, 0});
  ids.emplace(start, 0);
  sets.push_back(std::move(start));
  std::vector<uint32_t> next;   // [state * 256 + byte]; kDead / kDone as in CharClass, else a state
  std::vector<uint8_t> rest;    // bytes left in the character (all items of a non-start state agree)
  std::vector<Item> to;
  for (size_t k = 0; k < sets.size(); ++k) {
    if (sets.size() > kMaxClassStates) return false;
    next.resize((k + 1) * 256, CharClass::kDead);
    uint8_t r = 4;
    for (const auto& [i, p] : sets[k]) r = std::min<uint8_t>(r, static_cast<uint8_t>(seqs[i].size() - p));
    rest.push_back(r);
    for (int b = 0; b < 256; ++b) {
      to.clear();
      bool done = false;
      for (const auto& [i, p] : sets[k]) {
        if (b < seqs[i][p].first || b > seqs[i][p].second) continue;
        if (p + 1u == seqs[i].size()) {
          done = true;  // UTF-8 is prefix-free: no other item continues on this byte
        } else {
          to.push_back({i, static_cast<uint8_t>(p + 1)});
        }
      }
      if (done) {
        next[k * 256 + b] = CharClass::kDone;
      } else if (!to.empty()) {
        std::sort(to.begin(), to.end());
        auto [it, inserted] = ids.emplace(to, static_cast<uint32_t>(sets.size()));
        if (inserted) sets.push_back(to);
        next[k * 256 + b] = it->second;
      }
    }
  }
  // Merge states with equal rows, fewest bytes left first (their rows only point at kDone / kDead or at
  // states already merged).
  const size_t n = sets.size();
  std::vector<uint32_t> order(n);
  for (uint32_t k = 0; k < n; ++k) order[k] = k;
  std::stable_sort(order.begin() + 1, order.end(), [&](uint32_t a, uint32_t b) { return rest[a] < rest[b]; });
  std::rotate(order.begin(), order.begin() + 1, order.end());  // the start state last
  std::vector<uint32_t> canon(n, 0);
  absl::flat_hash_map<std::vector<uint32_t>, uint32_t> rows;
  std::vector<std::vector<uint32_t>> kept;  // canonical rows, in creation order
  std::vector<uint8_t> kept_rest;
  std::vector<uint32_t> row(256);
  for (uint32_t k : order) {
    for (int b = 0; b < 256; ++b) {
      const uint32_t t = next[k * 256 + b];
      row[b] = t >= CharClass::kDone ? t : canon[t];
    }
    auto [it, inserted] = rows.emplace(row, static_cast<uint32_t>(kept.size()));
    if (inserted) {
      kept.push_back(row);
      kept_rest.push_back(rest[k]);
    }
    canon[k] = it->second;
  }
  // Renumber: the start state becomes 0.
  const uint32_t m = static_cast<uint32_t>(kept.size());
  const uint32_t start_c = canon[0];
  auto renum = [&](uint32_t c) { return c == start_c ? 0 : c < start_c ? c + 1 : c; };
  out->next.assign(size_t{m} * 256, CharClass::kDead);
  out->live.assign(m, ByteSet());
  out->min_rest.assign(m, 1);
  for (uint32_t c = 0; c < m; ++c) {
    const uint32_t s = renum(c);
    out->min_rest[s] = kept_rest[c];
    for (int b = 0; b < 256; ++b) {
      const uint32_t t = kept[c][b];
      const uint16_t v = t >= CharClass::kDone ? static_cast<uint16_t>(t) : static_cast<uint16_t>(renum(t));
      out->next[size_t{s} * 256 + b] = v;
      if (v != CharClass::kDead) out->live[s].set(b);
    }
  }
  return true;
}

}  // namespace

absl::Status CompileBudget::check() {
  if (!stop_.ok()) return stop_;
  if (control_.cancelled != nullptr && control_.cancelled->load(std::memory_order_relaxed)) {
    stop_ = absl::CancelledError("compile cancelled");
  } else if (control_.deadline != absl::InfiniteFuture() && absl::Now() >= control_.deadline) {
    stop_ = absl::DeadlineExceededError("compile stopped after its time budget");
  }
  return stop_;
}

bool decode_utf8(absl::string_view s, size_t* pos, char32_t* cp) {
  const size_t i = *pos;
  if (i >= s.size()) return false;
  const uint8_t b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    *pos = i + 1;
    return true;
  }
  int len = 0;
  char32_t v = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) { len = 2; v = b0 & 0x1F; min = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; v = b0 & 0x0F; min = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; v = b0 & 0x07; min = 0x10000; }
  else return false;
  if (i + len > s.size()) return false;
  for (int k = 1; k < len; ++k) {
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return false;
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min || v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *cp = v;
  *pos = i + len;
  return true;
}

void normalize_ranges(CodepointRanges& ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodepointRanges merged;
  for (const auto& r : ranges) {
    if (r.first > r.second) continue;
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges = std::move(merged);
}

CodepointRanges complement_ranges(const CodepointRanges& ranges) {
  CodepointRanges out;
  char32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return out;
}

std::string describe_bytes(const ByteSet& s) {
  auto printable = [](int b) { return b > 0x20 && b < 0x7F && b != '"' && b != '\\' && b != '[' && b != ']' && b != '-'; };
  auto one = [&](int b) { return printable(b) ? std::string(1, static_cast<char>(b)) : absl::StrFormat("\\x%02X", b); };
  if (s.count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (!s.test(b)) continue;
      return printable(b) || b == '"' || b == '\\' ? absl::StrCat("\"", absl::CHexEscape(std::string(1, char(b))), "\"")
                                                   : absl::StrCat("[", one(b), "]");
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.test(b)) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.test(e + 1)) ++e;
    out += one(b);
    if (e > b) absl::StrAppend(&out, e > b + 1 ? "-" : "", one(e));
    b = e + 1;
  }
  return out + "]";
}

std::string quote_prefix(absl::string_view bytes, size_t max_bytes) {
  if (bytes.size() <= max_bytes) return absl::StrCat("\"", absl::CHexEscape(bytes), "\"");
  return absl::StrCat("\"", absl::CHexEscape(bytes.substr(0, max_bytes)), "\"...");
}

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rule_names.size(); ++r) {
    absl::StrAppend(&out, rule_names[r], " ::=");
    for (size_t a = 0; a < rule_alts[r].size(); ++a) {
      if (a > 0) out += " |";
      for (uint32_t p = rule_alts[r][a]; flat[p].kind != Element::Kind::kEnd; ++p) {
        out += " ";
        const uint32_t v = flat[p].value;
        switch (flat[p].kind) {
          case Element::Kind::kRule: out += rule_names[v]; break;
          case Element::Kind::kBytes: out += describe_bytes(byte_sets[v]); break;
          case Element::Kind::kClass: absl::StrAppend(&out, "<class", v, ">"); break;
          case Element::Kind::kRepeat: {
            const Repeat& rep = repeats[v];
            absl::StrAppend(&out, rule_names[rep.rule], "{", rep.min, ",",
                            rep.max == Elem::kUnbounded ? std::string() : absl::StrCat(rep.max), "}");
            break;
          }
          case Element::Kind::kEnd: break;
        }
      }
    }
    out += "\n";
  }
  return out;
}

size_t Grammar::memory_bytes() const {
  size_t n = sizeof(Grammar);
  for (const auto& name : rule_names) n += sizeof(std::string) + name.capacity();
  for (const auto& alts : rule_alts) n += sizeof(alts) + alts.capacity() * sizeof(uint32_t);
  n += flat.capacity() * sizeof(Element) + byte_sets.capacity() * sizeof(ByteSet) +
       repeats.capacity() * sizeof(Repeat) + rest_min.capacity() * sizeof(uint64_t) + class_representative.capacity();
  for (const auto& c : classes) {
    n += sizeof(CharClass) + c.next.capacity() * sizeof(uint16_t) + c.live.capacity() * sizeof(ByteSet) +
         c.min_rest.capacity();
  }
  return n;
}

// ---- GrammarBuilder ----

void GrammarBuilder::count_rule() {
  if (status_.ok() && static_cast<int64_t>(names_.size()) > limits_.max_rules) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("constraint too large: more than ", limits_.max_rules, " rules (max_rules)"));
  }
}

void GrammarBuilder::count_elements(int64_t n) {
  n_elements_ += n;
  if (status_.ok() && n_elements_ > limits_.max_elements) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("constraint too large: more than ", limits_.max_elements, " elements (max_elements)"));
  }
}

const absl::Status& GrammarBuilder::tick() {
  if (status_.ok()) {
    absl::Status st = budget_.tick();
    if (!st.ok()) status_ = std::move(st);
  }
  return status_;
}

uint32_t GrammarBuilder::add_rule(absl::string_view name) {
  std::string unique(name);
  if (by_name_.contains(unique)) {
    // Numbered from where the last collision of this name stopped: O(1) amortised, not a probe of
    // name-1, name-2, ... from the start each time.
    uint32_t& n = next_suffix_[unique];
    do {
      unique = absl::StrCat(name, "-", ++n);
    } while (by_name_.contains(unique));
  }
  const uint32_t id = static_cast<uint32_t>(names_.size());
  names_.push_back(unique);
  alts_.emplace_back();
  by_name_[std::move(unique)] = id;
  count_rule();
  return id;
}

uint32_t GrammarBuilder::rule_named(absl::string_view name) {
  auto it = by_name_.find(name);
  return it != by_name_.end() ? it->second : add_rule(name);
}

void GrammarBuilder::add_alternative(uint32_t rule, Seq seq) {
  count_elements(static_cast<int64_t>(seq.size()) + 1);
  alts_[rule].push_back(std::move(seq));
}

Elem GrammarBuilder::byte(uint8_t b) {
  Elem e;
  e.bytes.set(b);
  return e;
}

Elem GrammarBuilder::bytes(const ByteSet& set) {
  Elem e;
  e.bytes = set;
  return e;
}

Elem GrammarBuilder::ref(uint32_t rule) {
  Elem e;
  e.kind = Elem::Kind::kRule;
  e.rule = rule;
  return e;
}

void GrammarBuilder::append_literal(Seq& seq, absl::string_view s) {
  for (char c : s) seq.push_back(byte(static_cast<uint8_t>(c)));
}

Elem GrammarBuilder::codepoints(CodepointRanges ranges) {
  normalize_ranges(ranges);
  if (ranges.empty() || ranges.back().second < 0x80) {
    ByteSet set;
    for (const auto& [lo, hi] : ranges) set |= byte_range(uint8_t(lo), uint8_t(hi));
    return bytes(set);
  }
  std::string key;
  for (const auto& [lo, hi] : ranges) absl::StrAppend(&key, uint32_t(lo), "-", uint32_t(hi), ",");
  if (auto it = class_ids_.find(key); it != class_ids_.end()) {
    Elem e;
    e.kind = Elem::Kind::kClass;
    e.rule = it->second;
    return e;
  }
  std::vector<ByteRanges> seqs;
  for (const auto& [lo, hi] : ranges) utf8_sequences(lo, std::min(hi, kMaxCodepoint), seqs);
  CharClass dfa;
  if (make_class(seqs, &dfa)) {
    Elem e;
    e.kind = Elem::Kind::kClass;
    e.rule = static_cast<uint32_t>(classes_.size());
    count_elements(kElementsPerClassState * static_cast<int64_t>(dfa.n_states()));
    classes_.push_back(std::move(dfa));
    class_ids_[key] = e.rule;
    return e;
  }
  // Too many states: a rule of byte-sequence alternatives (all one-byte characters in one alternative).
  const uint32_t rule = add_rule("[class]");
  ByteSet ascii;
  for (const auto& s : seqs) {
    if (s.size() == 1) {
      ascii |= byte_range(s[0].first, s[0].second);
      continue;
    }
    Seq alt;
    for (const auto& [lo, hi] : s) alt.push_back(bytes(byte_range(lo, hi)));
    add_alternative(rule, std::move(alt));
  }
  if (ascii.any()) add_alternative(rule, {bytes(ascii)});
  return ref(rule);
}

uint32_t GrammarBuilder::group(std::vector<Seq> alts, absl::string_view hint) {
  const uint32_t rule = add_rule(hint);
  for (Seq& s : alts) add_alternative(rule, std::move(s));
  return rule;
}

absl::StatusOr<Elem> GrammarBuilder::repeat(const Seq& body, int64_t min, int64_t max, absl::string_view hint) {
  const int64_t bound = std::max(min, max);
  if (min < 0 || bound > limits_.max_repeat) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition bound ", bound, " exceeds max_repeat ", limits_.max_repeat));
  }
  if (unrolled_repeats_ || (min <= 1 && max <= 1)) return ref(repeat_internal(body, min, max, hint));
  if (max >= 0 && max < min) return bytes(ByteSet());  // matches nothing
  Elem e;
  e.kind = Elem::Kind::kRepeat;
  e.rule = body.size() == 1 && body[0].kind == Elem::Kind::kRule ? body[0].rule
                                                                  : group({body}, absl::StrCat(hint, "-item"));
  e.min = static_cast<uint32_t>(min);
  e.max = max < 0 ? Elem::kUnbounded : static_cast<uint32_t>(max);
  return e;
}

uint32_t GrammarBuilder::repeat_internal(const Seq& body, int64_t min, int64_t max, absl::string_view hint) {
  const uint32_t rule = add_rule(hint);
  if (max >= 0 && max < min) return rule;  // no alternatives: matches nothing
  // A multi-element body becomes one rule so each copy below costs one element.
  Seq unit = body;
  if (body.size() > 1) unit = {ref(group({body}, absl::StrCat(hint, "-item")))};
  Seq alt;
  for (int64_t i = 0; i < min && status_.ok(); ++i) alt.insert(alt.end(), unit.begin(), unit.end());
  if (max < 0) {
    // star ::= unit star | "" — the recursive reference is in tail position, so stacks do not grow.
    const uint32_t star = add_rule(absl::StrCat(hint, "-star"));
    Seq loop = unit;
    loop.push_back(ref(star));
    add_alternative(star, std::move(loop));
    add_alternative(star, Seq{});
    alt.push_back(ref(star));
  } else if (max > min) {
    // Nested optionals ( unit ( unit ( ... )? )? )?: unambiguous, one live stack per step.
    uint32_t inner = 0;
    for (int64_t k = 1; k <= max - min && status_.ok(); ++k) {
      const uint32_t opt = add_rule(absl::StrCat(hint, "-opt"));
      Seq more = unit;
      if (k > 1) more.push_back(ref(inner));
      add_alternative(opt, std::move(more));
      add_alternative(opt, Seq{});
      inner = opt;
    }
    alt.push_back(ref(inner));
  }
  add_alternative(rule, std::move(alt));
  return rule;
}

Seq GrammarBuilder::literal_trie(std::vector<std::string> words, absl::string_view hint) {
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  if (words.empty()) return {bytes(ByteSet())};
  // A trie node covers the sorted words [b, e) that share their first d bytes. Its sequence is the
  // longest prefix they all share past d, then (when they differ) a rule with one alternative per next
  // byte, plus an empty one when a word ends there. Built with an explicit stack: words may be long.
  struct Frame {
    size_t b, e, d, i;  // i: next word to group
    Seq prefix;
    std::vector<Seq> alts;
  };
  auto open = [&](size_t b, size_t e, size_t d) {
    Frame f{b, e, d, b, {}, {}};
    const std::string &first = words[b], &last = words[e - 1];
    size_t l = d;
    while (l < first.size() && l < last.size() && first[l] == last[l]) ++l;
    append_literal(f.prefix, absl::string_view(first).substr(d, l - d));
    f.d = l;
    if (first.size() == l) {  // a word ends here (sorted: it is the first)
      f.alts.emplace_back();
      ++f.i;
    }
    return f;
  };
  std::vector<Frame> stack;
  stack.push_back(open(0, words.size(), 0));
  Seq result;
  while (!stack.empty()) {
    if (!tick().ok()) return {bytes(ByteSet())};
    Frame& f = stack.back();
    if (f.i < f.e) {
      size_t j = f.i;
      const char c = words[f.i][f.d];
      while (j < f.e && words[j][f.d] == c) ++j;
      const size_t b = f.i;
      f.i = j;
      const size_t d = f.d;
      stack.push_back(open(b, j, d));  // invalidates f
      continue;
    }
    Seq out = std::move(f.prefix);
    if (f.alts.size() == 1) {
      out.insert(out.end(), f.alts[0].begin(), f.alts[0].end());
    } else if (f.alts.size() > 1) {
      out.push_back(ref(group(std::move(f.alts), hint)));
    }
    stack.pop_back();
    if (stack.empty()) {
      result = std::move(out);
    } else {
      stack.back().alts.push_back(std::move(out));
    }
  }
  return result;
}
}  // namespace frost::constrain
