#include "core/constrain/grammar.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frost::constrain {
namespace {

constexpr char32_t kMaxCodepoint = 0x10FFFF;
constexpr uint64_t kUnsettled = uint64_t{1} << 62;

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

std::string describe_set(const ByteSet& s) {
  if (s.count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (!s.test(b)) continue;
      if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') return absl::StrCat("\"", std::string(1, char(b)), "\"");
      return absl::StrFormat("[\\x%02X]", b);
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.test(b)) { ++b; continue; }
    int e = b;
    while (e + 1 < 256 && s.test(e + 1)) ++e;
    out += absl::StrFormat("\\x%02X", b);
    if (e > b) out += absl::StrFormat("-\\x%02X", e);
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

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

std::string Grammar::to_string() const {
  std::string out;
  for (size_t r = 0; r < rule_names.size(); ++r) {
    absl::StrAppend(&out, rule_names[r], " ::=");
    for (size_t a = 0; a < rule_alts[r].size(); ++a) {
      if (a > 0) out += " |";
      for (uint32_t p = rule_alts[r][a]; flat[p].kind != Element::Kind::kEnd; ++p) {
        out += " ";
        out += flat[p].kind == Element::Kind::kRule ? rule_names[flat[p].value] : describe_set(byte_sets[flat[p].value]);
      }
    }
    out += "\n";
  }
  return out;
}

// ---- GrammarBuilder ----

uint32_t GrammarBuilder::add_rule(absl::string_view name) {
  std::string unique(name);
  for (int i = 1; by_name_.contains(unique); ++i) unique = absl::StrCat(name, "-", i);
  const uint32_t id = static_cast<uint32_t>(names_.size());
  names_.push_back(unique);
  alts_.emplace_back();
  by_name_[unique] = id;
  return id;
}

uint32_t GrammarBuilder::rule_named(absl::string_view name) {
  auto it = by_name_.find(name);
  return it != by_name_.end() ? it->second : add_rule(name);
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
  if (auto it = class_rules_.find(key); it != class_rules_.end()) return ref(it->second);
  const uint32_t rule = add_rule("[class]");
  class_rules_[key] = rule;
  // All one-byte characters share a single alternative, so ASCII-heavy classes stay one stack.
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  for (const auto& [lo, hi] : ranges) utf8_sequences(lo, std::min(hi, kMaxCodepoint), seqs);
  ByteSet ascii;
  for (const auto& s : seqs) {
    if (s.size() == 1) {
      ascii |= byte_range(s[0].first, s[0].second);
      continue;
    }
    Seq alt;
    for (const auto& [lo, hi] : s) alt.push_back(bytes(byte_range(lo, hi)));
    alts_[rule].push_back(std::move(alt));
  }
  if (ascii.any()) alts_[rule].push_back({bytes(ascii)});
  return ref(rule);
}

uint32_t GrammarBuilder::group(std::vector<Seq> alts, absl::string_view hint) {
  const uint32_t rule = add_rule(hint);
  alts_[rule] = std::move(alts);
  return rule;
}

absl::StatusOr<uint32_t> GrammarBuilder::repeat(const Seq& body, int64_t min, int64_t max, absl::string_view hint) {
  const int64_t bound = std::max(min, max);
  if (min < 0 || bound > limits_.max_repeat) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition bound ", bound, " exceeds max_repeat ", limits_.max_repeat));
  }
  return repeat_internal(body, min, max, hint);
}

uint32_t GrammarBuilder::repeat_internal(const Seq& body, int64_t min, int64_t max, absl::string_view hint) {
  const uint32_t rule = add_rule(hint);
  if (max >= 0 && max < min) return rule;  // no alternatives: matches nothing
  // A multi-element body becomes one rule so each copy below costs one element.
  Seq unit = body;
  if (body.size() > 1) unit = {ref(group({body}, absl::StrCat(hint, "-item")))};
  Seq alt;
  for (int64_t i = 0; i < min; ++i) alt.insert(alt.end(), unit.begin(), unit.end());
  if (max < 0) {
    // star ::= unit star | "" — the recursive reference is in tail position, so stacks do not grow.
    const uint32_t star = add_rule(absl::StrCat(hint, "-star"));
    Seq loop = unit;
    loop.push_back(ref(star));
    alts_[star] = {std::move(loop), Seq{}};
    alt.push_back(ref(star));
  } else if (max > min) {
    // Nested optionals ( unit ( unit ( ... )? )? )?: unambiguous, one live stack per step.
    uint32_t inner = 0;
    for (int64_t k = 1; k <= max - min; ++k) {
      const uint32_t opt = add_rule(absl::StrCat(hint, "-opt"));
      Seq more = unit;
      if (k > 1) more.push_back(ref(inner));
      alts_[opt] = {std::move(more), Seq{}};
      inner = opt;
    }
    alt.push_back(ref(inner));
  }
  alts_[rule].push_back(std::move(alt));
  return rule;
}

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::build(uint32_t root) const {
  const size_t n = names_.size();
  int64_t n_elements = 0;
  for (const auto& alts : alts_) {
    for (const auto& a : alts) n_elements += static_cast<int64_t>(a.size()) + 1;
  }
  if (static_cast<int64_t>(n) > limits_.max_rules) {
    return absl::InvalidArgumentError(
        absl::StrCat("constraint too large: ", n, " rules exceeds max_rules ", limits_.max_rules));
  }
  if (n_elements > limits_.max_elements) {
    return absl::InvalidArgumentError(absl::StrCat("constraint too large: ", n_elements,
                                                   " elements exceeds max_elements ", limits_.max_elements));
  }
  // Shortest string of each rule (Knuth's generalisation of Dijkstra to grammars): an alternative counts
  // the rule references not yet settled and sums the lengths of those that are; when the count reaches
  // zero the alternative offers its rule a length, and the smallest offer settles the rule. A rule never
  // settled derives no finite string (unproductive).
  struct AltRef { uint32_t rule, alt; };
  std::vector<std::vector<AltRef>> users(n);
  std::vector<std::vector<int>> missing(n);
  std::vector<std::vector<uint64_t>> partial(n);
  std::vector<uint64_t> min_len(n, kUnsettled);
  using Offer = std::pair<uint64_t, uint32_t>;
  std::priority_queue<Offer, std::vector<Offer>, std::greater<Offer>> offers;
  for (uint32_t r = 0; r < n; ++r) {
    missing[r].resize(alts_[r].size());
    partial[r].resize(alts_[r].size());
    for (uint32_t a = 0; a < alts_[r].size(); ++a) {
      for (const Elem& e : alts_[r][a]) {
        if (e.kind == Elem::Kind::kRule) {
          users[e.rule].push_back({r, a});
          ++missing[r][a];
        } else if (e.bytes.none()) {
          missing[r][a] += 1 << 30;  // never satisfiable
        } else {
          ++partial[r][a];
        }
      }
      if (missing[r][a] == 0) offers.push({partial[r][a], r});
    }
  }
  while (!offers.empty()) {
    const auto [len, r] = offers.top();
    offers.pop();
    if (min_len[r] != kUnsettled) continue;
    min_len[r] = len;
    for (const AltRef& u : users[r]) {
      partial[u.rule][u.alt] = std::min<uint64_t>(partial[u.rule][u.alt] + len, kUnsettled - 1);
      if (--missing[u.rule][u.alt] == 0 && min_len[u.rule] == kUnsettled) {
        offers.push({partial[u.rule][u.alt], u.rule});
      }
    }
  }
  std::vector<bool> productive(n);
  for (uint32_t r = 0; r < n; ++r) productive[r] = min_len[r] != kUnsettled;
  if (!productive[root]) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsatisfiable: rule '", names_[root], "' matches no finite string"));
  }
  // Keep only alternatives whose elements are all productive: every stack can then finish.
  std::vector<std::vector<const Seq*>> kept(n);
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t a = 0; a < alts_[r].size(); ++a) {
      if (missing[r][a] <= 0) kept[r].push_back(&alts_[r][a]);
    }
  }
  // Nullable rules (derive the empty string), by fixpoint over the kept alternatives.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq* s : kept[r]) {
        bool all = true;
        for (const Elem& e : *s) all = all && e.kind == Elem::Kind::kRule && nullable[e.rule];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a cycle of references reachable without consuming a byte would make expansion loop.
  std::vector<std::vector<uint32_t>> left(n);
  for (uint32_t r = 0; r < n; ++r) {
    for (const Seq* s : kept[r]) {
      for (const Elem& e : *s) {
        if (e.kind != Elem::Kind::kRule) break;
        left[r].push_back(e.rule);
        if (!nullable[e.rule]) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the DFS path, 2 done
  for (uint32_t start = 0; start < n; ++start) {
    if (color[start] != 0) continue;
    std::vector<std::pair<uint32_t, size_t>> path = {{start, 0}};
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t next = left[r][i++];
      if (color[next] == 1) {
        return absl::InvalidArgumentError(absl::StrCat("rule '", names_[next], "' is left-recursive"));
      }
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
  // Flatten.
  auto g = std::make_shared<Grammar>();
  g->rule_names = names_;
  g->rule_alts.resize(n);
  g->root = root;
  g->max_stacks = limits_.max_stacks;
  g->max_stack_depth = limits_.max_stack_depth;
  std::unordered_map<ByteSet, uint32_t> set_ids;
  for (uint32_t r = 0; r < n; ++r) {
    for (const Seq* s : kept[r]) {
      g->rule_alts[r].push_back(static_cast<uint32_t>(g->flat.size()));
      for (const Elem& e : *s) {
        Grammar::Element el;
        if (e.kind == Elem::Kind::kRule) {
          el.kind = Grammar::Element::Kind::kRule;
          el.value = e.rule;
        } else {
          el.kind = Grammar::Element::Kind::kBytes;
          auto [it, inserted] = set_ids.emplace(e.bytes, static_cast<uint32_t>(g->byte_sets.size()));
          if (inserted) g->byte_sets.push_back(e.bytes);
          el.value = it->second;
        }
        g->flat.push_back(el);
      }
      g->flat.push_back(Grammar::Element{});
    }
  }
  // Fewest bytes from each position to the end of its alternative (walked backwards from each kEnd).
  g->rest_min.assign(g->flat.size(), 0);
  for (size_t p = g->flat.size(); p-- > 0;) {
    const Grammar::Element& el = g->flat[p];
    if (el.kind == Grammar::Element::Kind::kEnd) continue;
    const uint64_t here = el.kind == Grammar::Element::Kind::kBytes ? 1 : min_len[el.value];
    g->rest_min[p] = std::min<uint64_t>(here + g->rest_min[p + 1], kUnsettled - 1);
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

// ---- Recognizer ----

Recognizer::Recognizer(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) { reset(); }

// Everything interned or memoised over nodes_ (which the callers clear or move out themselves).
void Recognizer::clear_interned() {
  index_.clear();
  sets_.clear();
  set_index_.clear();
  set_memo_.clear();
  memo_.clear();
  memo_pool_.clear();
}

void Recognizer::reset() {
  nodes_.clear();
  clear_interned();
  n_limit_hits_ = 0;
  state_.clear();
  bool ok = true;
  for (uint32_t a : grammar_->rule_alts[grammar_->root]) {
    if (grammar_->flat[a].kind == Grammar::Element::Kind::kEnd) {
      state_.push_back(kEmptyStack);
    } else {
      const uint32_t s = intern(a, kEmptyStack);
      ok = ok && s != kEmptyStack && expand(s, &state_, 0);
    }
  }
  finish(&state_);
  if (!ok || static_cast<int64_t>(state_.size()) > grammar_->max_stacks) {
    ++n_limit_hits_;
    state_.clear();
  }
}

uint32_t Recognizer::intern(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | parent;
  auto [it, inserted] = index_.emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (!inserted) return it->second;
  const uint32_t depth = parent == kEmptyStack ? 1 : nodes_[parent].depth + 1;
  if (static_cast<int64_t>(depth) > grammar_->max_stack_depth) {
    index_.erase(it);
    return kEmptyStack;  // callers treat this as "over the limit"
  }
  nodes_.push_back({pos, parent, depth});
  return it->second;
}

bool Recognizer::expand(uint32_t s, StackSet* out, int guard) {
  // The guard bounds the work of one expansion: without left recursion it terminates, but a highly
  // ambiguous grammar can still fan out exponentially.
  if (guard > 4 * grammar_->max_stacks || static_cast<int64_t>(out->size()) > 4 * grammar_->max_stacks) {
    return false;
  }
  if (s == kEmptyStack) {
    out->push_back(s);
    return true;
  }
  const Node node = nodes_[s];
  const Grammar::Element el = grammar_->flat[node.pos];
  if (el.kind == Grammar::Element::Kind::kBytes) {
    out->push_back(s);
    return true;
  }
  const bool tail = grammar_->flat[node.pos + 1].kind == Grammar::Element::Kind::kEnd;
  const uint32_t base = tail ? node.parent : intern(node.pos + 1, node.parent);
  if (!tail && base == kEmptyStack) return false;
  bool ok = true;
  for (uint32_t a : grammar_->rule_alts[el.value]) {
    if (grammar_->flat[a].kind == Grammar::Element::Kind::kEnd) {
      ok = expand(base, out, guard + 1) && ok;
    } else {
      const uint32_t t = intern(a, base);
      ok = t != kEmptyStack && expand(t, out, guard + 1) && ok;
    }
    if (!ok) return false;
  }
  return true;
}

void Recognizer::finish(StackSet* out) const {
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

Recognizer::Step Recognizer::step(const StackSet& from, uint8_t byte, StackSet* out) {
  out->clear();
  bool over = false;
  for (uint32_t s : from) {
    if (s == kEmptyStack) continue;
    const Transition t = transition(s, byte);
    if (t.len == kOverLimit) {
      over = true;
      break;
    }
    out->insert(out->end(), memo_pool_.begin() + t.begin, memo_pool_.begin() + t.begin + t.len);
  }
  finish(out);
  if (over || static_cast<int64_t>(out->size()) > grammar_->max_stacks) {
    ++n_limit_hits_;
    out->clear();
    return Step::kOverLimit;
  }
  return out->empty() ? Step::kDead : Step::kOk;
}

Recognizer::Transition Recognizer::transition(uint32_t s, uint8_t byte) {
  // Memoised per (stack, byte): the trie walk asks the same question for many tokens (every token that
  // continues a string does it from the same stack), and a hit is one hash lookup instead of an expansion.
  const uint64_t key = (uint64_t{s} << 8) | byte;
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  Transition t{static_cast<uint32_t>(memo_pool_.size()), 0};
  const Node node = nodes_[s];
  if (grammar_->byte_sets[grammar_->flat[node.pos].value].test(byte)) {
    scratch_.clear();
    const bool tail = grammar_->flat[node.pos + 1].kind == Grammar::Element::Kind::kEnd;
    const uint32_t next = tail ? node.parent : intern(node.pos + 1, node.parent);
    if ((tail || next != kEmptyStack) && expand(next, &scratch_, 0)) {
      finish(&scratch_);
      memo_pool_.insert(memo_pool_.end(), scratch_.begin(), scratch_.end());
      t.len = static_cast<uint32_t>(scratch_.size());
    } else {
      t.len = kOverLimit;
    }
  }
  memo_.emplace(key, t);
  return t;
}

uint32_t Recognizer::intern_state(const StackSet& s) {
  auto [it, inserted] = set_index_.emplace(s, static_cast<uint32_t>(sets_.size()));
  if (inserted) sets_.push_back(s);
  return it->second;
}

uint32_t Recognizer::step_interned(uint32_t id, uint8_t byte) {
  const uint64_t key = (uint64_t{id} << 8) | byte;
  if (auto it = set_memo_.find(key); it != set_memo_.end()) return it->second;
  StackSet next;
  const Step st = step(sets_[id], byte, &next);
  const uint32_t result = st == Step::kOk ? intern_state(next) : st == Step::kDead ? kDeadState : kOverLimitState;
  set_memo_.emplace(key, result);
  return result;
}

bool Recognizer::advance(uint8_t byte) {
  StackSet next;
  step(state_, byte, &next);
  state_ = std::move(next);
  return !state_.empty();
}

bool Recognizer::advance_bytes(absl::string_view bytes) {
  for (char c : bytes) {
    if (!advance(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

ByteSet Recognizer::next_bytes() const {
  ByteSet out;
  for (uint32_t s : state_) {
    if (s != kEmptyStack) out |= grammar_->byte_sets[grammar_->flat[nodes_[s].pos].value];
  }
  return out;
}

uint64_t Recognizer::min_bytes_to_accept(const StackSet& s) const {
  uint64_t best = UINT64_MAX;
  for (uint32_t id : s) {
    uint64_t sum = 0;
    for (uint32_t cur = id; cur != kEmptyStack; cur = nodes_[cur].parent) sum += grammar_->rest_min[nodes_[cur].pos];
    best = std::min(best, sum);
  }
  return best;
}

std::string Recognizer::canonical_key(const StackSet& s) const {
  std::vector<std::string> stacks;
  stacks.reserve(s.size());
  for (uint32_t id : s) {
    std::string one;
    for (uint32_t cur = id; cur != kEmptyStack; cur = nodes_[cur].parent) {
      const uint32_t pos = nodes_[cur].pos;
      one.append(reinterpret_cast<const char*>(&pos), sizeof(pos));
    }
    one.append(4, '\xff');
    stacks.push_back(std::move(one));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key;
  for (const auto& one : stacks) key += one;
  return key;
}

void Recognizer::compact() {
  std::vector<Node> old = std::move(nodes_);
  nodes_.clear();
  clear_interned();
  absl::flat_hash_map<uint32_t, uint32_t> remap;
  // Re-interns a stack bottom-up; stacks are shallow next to the arena, so recursion depth is fine.
  auto copy = [&](auto& self, uint32_t id) -> uint32_t {
    if (id == kEmptyStack) return kEmptyStack;
    if (auto it = remap.find(id); it != remap.end()) return it->second;
    const uint32_t parent = self(self, old[id].parent);
    const uint32_t fresh = intern(old[id].pos, parent);
    remap[id] = fresh;
    return fresh;
  };
  for (uint32_t& s : state_) s = copy(copy, s);
  finish(&state_);
}

}  // namespace frost::constrain
