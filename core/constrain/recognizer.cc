// The byte-level pushdown recogniser over a Grammar (grammar.h), and the compile-time ambiguity probe
// that explores it.
#include <algorithm>
#include <deque>
#include <queue>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/constrain/grammar.h"

namespace frost::constrain {

using Kind = Grammar::Element::Kind;

Recognizer::Recognizer(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  // A request's first masks intern a few hundred nodes and transitions: start the tables there rather
  // than rehash through 8, 16, 32, ... inside them.
  constexpr size_t kInitial = 256;
  nodes_.reserve(kInitial);
  index_.reserve(kInitial);
  memo_.reserve(kInitial);
  memo_pool_.reserve(kInitial);
  set_memo_.reserve(kInitial);
  reset();
}

std::string Recognizer::describe_limit(Limit limit) const {
  if (limit == Limit::kDepth) {
    return absl::StrCat("a parse nests deeper than ", grammar_->max_stack_depth, " (max_stack_depth)");
  }
  return absl::StrCat("more than ", grammar_->max_stacks, " parses are alive (max_stacks)");
}

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
  last_limit_ = Limit::kNone;
  state_.clear();
  Limit limit = Limit::kNone;
  for (uint32_t a : grammar_->rule_alts[grammar_->root]) {
    if (grammar_->flat[a].kind == Kind::kEnd) {
      state_.push_back(kEmptyStack);
      continue;
    }
    const uint32_t s = intern(a, kEmptyStack, 0);
    limit = s == kNoNode ? Limit::kDepth : expand(s, &state_);
    if (limit != Limit::kNone) break;
  }
  finish(&state_);
  if (limit == Limit::kNone && static_cast<int64_t>(state_.size()) > grammar_->max_stacks) limit = Limit::kStacks;
  if (limit != Limit::kNone) {
    note_limit(limit);
    state_.clear();
  }
}

uint32_t Recognizer::intern(uint32_t pos, uint32_t parent, uint32_t aux) {
  auto [it, inserted] = index_.emplace(NodeKey{pos, parent, aux}, static_cast<uint32_t>(nodes_.size()));
  if (!inserted) return it->second;
  const uint32_t depth = parent == kEmptyStack ? 1 : nodes_[parent].depth + 1;
  if (static_cast<int64_t>(depth) > grammar_->max_stack_depth) {
    index_.erase(it);
    return kNoNode;
  }
  nodes_.push_back({pos, parent, depth, aux});
  return it->second;
}

uint32_t Recognizer::continuation(const Node& node) {
  // In tail position the parent is the continuation itself: stacks do not grow through tail references.
  return grammar_->flat[node.pos + 1].kind == Kind::kEnd ? node.parent : intern(node.pos + 1, node.parent, 0);
}

Recognizer::Limit Recognizer::expand(uint32_t s, StackSet* out) {
  // Depth-first with an explicit work list (no recursion: the depth of a left chain is the grammar's, not
  // the C++ stack's). Left recursion is refused by build(), so this terminates; the bounds only stop
  // highly ambiguous grammars from fanning out. kUnblock items close the scope of a repeat body: while a
  // body's own expansion runs, reaching the repeat's next count means the iteration matched nothing, and
  // that path is dropped (the count before it already offers the same continuations).
  const Grammar& g = *grammar_;
  const size_t max_out = 4 * static_cast<size_t>(g.max_stacks);
  const int64_t max_steps = 64 * int64_t{g.max_stacks} + static_cast<int64_t>(g.rule_alts.size());
  int64_t steps = 0;
  work_.clear();
  blocked_.clear();
  work_.push_back(s);
  while (!work_.empty()) {
    const uint32_t id = work_.back();
    work_.pop_back();
    if (id == kUnblock) {
      blocked_.pop_back();
      continue;
    }
    if (++steps > max_steps || out->size() > max_out) return Limit::kStacks;
    if (id == kEmptyStack) {
      out->push_back(id);
      continue;
    }
    const Node node = nodes_[id];
    const Grammar::Element el = g.flat[node.pos];
    switch (el.kind) {
      case Kind::kBytes:
      case Kind::kClass:
        out->push_back(id);
        break;
      case Kind::kRule: {
        const uint32_t base = continuation(node);
        if (base == kNoNode) return Limit::kDepth;
        for (uint32_t a : g.rule_alts[el.value]) {
          const uint32_t t = g.flat[a].kind == Kind::kEnd ? base : intern(a, base, 0);
          if (t == kNoNode) return Limit::kDepth;
          work_.push_back(t);
        }
        break;
      }
      case Kind::kRepeat: {
        if (std::find(blocked_.begin(), blocked_.end(), id) != blocked_.end()) break;  // an empty iteration
        const Grammar::Repeat& rep = g.repeats[el.value];
        if (node.aux >= rep.min) {
          const uint32_t base = continuation(node);
          if (base == kNoNode) return Limit::kDepth;
          work_.push_back(base);
        }
        if (node.aux < rep.max) {
          // Unbounded: the count stops at min, past which every count behaves alike.
          const uint32_t count = rep.max == Elem::kUnbounded ? std::min(node.aux + 1, rep.min) : node.aux + 1;
          const uint32_t again = intern(node.pos, node.parent, count);
          if (again == kNoNode) return Limit::kDepth;
          work_.push_back(kUnblock);
          blocked_.push_back(again);
          for (uint32_t a : g.rule_alts[rep.rule]) {
            if (g.flat[a].kind == Kind::kEnd) continue;  // an empty iteration
            const uint32_t t = intern(a, again, 0);
            if (t == kNoNode) return Limit::kDepth;
            work_.push_back(t);
          }
        }
        break;
      }
      case Kind::kEnd:
        break;  // never a stack position: continuation() skips ends
    }
  }
  return Limit::kNone;
}

void Recognizer::finish(StackSet* out) const {
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

Recognizer::Advance Recognizer::advance_from(const StackSet& from, uint8_t byte, StackSet* out) {
  out->clear();
  Limit limit = Limit::kNone;
  for (uint32_t s : from) {
    if (s == kEmptyStack) continue;
    const Transition t = transition(s, byte);
    if (t.len == kOverLimit) {
      limit = static_cast<Limit>(t.begin);
      break;
    }
    out->insert(out->end(), memo_pool_.begin() + t.begin, memo_pool_.begin() + t.begin + t.len);
  }
  finish(out);
  if (limit == Limit::kNone && static_cast<int64_t>(out->size()) > grammar_->max_stacks) limit = Limit::kStacks;
  if (limit != Limit::kNone) {
    note_limit(limit);
    out->clear();
    return Advance::kOverLimit;
  }
  return out->empty() ? Advance::kDead : Advance::kOk;
}

Recognizer::Transition Recognizer::transition(uint32_t s, uint8_t byte) {
  // Memoised per (stack, byte): the trie walk asks the same question for many tokens (every token that
  // continues a string does it from the same stack), and a hit is one hash lookup instead of an expansion.
  const uint64_t key = (uint64_t{s} << 8) | byte;
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  Transition t{static_cast<uint32_t>(memo_pool_.size()), 0};
  const Node node = nodes_[s];
  const Grammar::Element el = grammar_->flat[node.pos];
  // The element's own verdict on the byte: kDone (complete: continue below it), a class state to stay
  // in, or nothing.
  uint32_t next = CharClass::kDead;
  if (el.kind == Kind::kBytes) {
    if (grammar_->byte_sets[el.value].test(byte)) next = CharClass::kDone;
  } else {
    next = grammar_->classes[el.value].next[size_t{node.aux} * 256 + byte];
  }
  if (next == CharClass::kDone) {
    scratch_.clear();
    const uint32_t cont = continuation(node);
    const Limit limit = cont == kNoNode ? Limit::kDepth : expand(cont, &scratch_);
    if (limit == Limit::kNone) {
      finish(&scratch_);
      memo_pool_.insert(memo_pool_.end(), scratch_.begin(), scratch_.end());
      t.len = static_cast<uint32_t>(scratch_.size());
    } else {
      t = {static_cast<uint32_t>(limit), kOverLimit};
    }
  } else if (next != CharClass::kDead) {
    // Inside a multi-byte character: the same position, the next DFA state (same depth: never refused).
    memo_pool_.push_back(intern(node.pos, node.parent, next));
    t.len = 1;
  }
  memo_.emplace(key, t);
  return t;
}

uint32_t Recognizer::intern_state(const StackSet& s) {
  auto [it, inserted] = set_index_.emplace(s, static_cast<uint32_t>(sets_.size()));
  if (inserted) sets_.push_back(s);
  return it->second;
}

uint32_t Recognizer::advance_interned(uint32_t id, uint8_t byte) {
  const uint64_t key = (uint64_t{id} << 8) | byte;
  if (auto it = set_memo_.find(key); it != set_memo_.end()) return it->second;
  StackSet next;
  const Advance st = advance_from(sets_[id], byte, &next);
  uint32_t result = kDeadState;
  if (st == Advance::kOk) {
    result = intern_state(next);
  } else if (st == Advance::kOverLimit) {
    result = last_limit_ == Limit::kDepth ? kOverDepthState : kOverLimitState;
  }
  set_memo_.emplace(key, result);
  return result;
}

bool Recognizer::advance(uint8_t byte) {
  StackSet next;
  advance_from(state_, byte, &next);
  state_ = std::move(next);
  return !state_.empty();
}

bool Recognizer::advance_bytes(absl::string_view bytes) {
  for (char c : bytes) {
    if (!advance(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

ByteSet Recognizer::next_bytes_of(const StackSet& s) const {
  ByteSet out;
  for (uint32_t id : s) {
    if (id == kEmptyStack) continue;
    const Node& node = nodes_[id];
    const Grammar::Element el = grammar_->flat[node.pos];
    out |= el.kind == Kind::kBytes ? grammar_->byte_sets[el.value] : grammar_->classes[el.value].live[node.aux];
  }
  return out;
}

uint64_t Recognizer::min_bytes_to_accept(const StackSet& s) const {
  const Grammar& g = *grammar_;
  uint64_t best = UINT64_MAX;
  for (uint32_t id : s) {
    uint64_t sum = 0;
    for (uint32_t cur = id; cur != kEmptyStack; cur = nodes_[cur].parent) {
      const Node& node = nodes_[cur];
      const Grammar::Element el = g.flat[node.pos];
      if (el.kind == Kind::kClass) {
        sum += g.classes[el.value].min_rest[node.aux] + g.rest_min[node.pos + 1];
      } else if (el.kind == Kind::kRepeat) {
        const Grammar::Repeat& rep = g.repeats[el.value];
        const uint64_t left = node.aux >= rep.min ? 0 : rep.min - node.aux;
        sum += left * rep.body_min_bytes + g.rest_min[node.pos + 1];
      } else {
        sum += g.rest_min[node.pos];
      }
    }
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
      const Node& node = nodes_[cur];
      one.append(reinterpret_cast<const char*>(&node.pos), sizeof(node.pos));
      // The position decides whether an aux word follows, so the encoding stays unambiguous.
      const Kind kind = grammar_->flat[node.pos].kind;
      if (kind == Kind::kRepeat || kind == Kind::kClass) {
        one.append(reinterpret_cast<const char*>(&node.aux), sizeof(node.aux));
      }
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
  // Re-interns each stack bottom-up: the nodes not yet copied are collected top-down first (a stack may
  // be max_stack_depth deep, so no recursion).
  std::vector<uint32_t> path;
  for (uint32_t& s : state_) {
    path.clear();
    uint32_t cur = s;
    while (cur != kEmptyStack && !remap.contains(cur)) {
      path.push_back(cur);
      cur = old[cur].parent;
    }
    uint32_t parent = cur == kEmptyStack ? kEmptyStack : remap[cur];
    for (size_t i = path.size(); i-- > 0;) {
      const Node& node = old[path[i]];
      parent = intern(node.pos, parent, node.aux);  // same depth as before: never refused
      remap[path[i]] = parent;
    }
    s = parent;
  }
  finish(&state_);
}

// ---- the ambiguity probe ----

namespace {

// How a repeat count looks to the probe: only where it stands against the bounds.
uint32_t count_class(uint32_t aux, const Grammar::Repeat& rep) {
  if (aux == 0) return 0;
  if (aux < rep.min) return 1;
  if (aux == rep.min) return 2;
  return aux < rep.max ? 3 : 4;
}

constexpr int kSituationDepth = 4;  // stack nodes from the top that tell situations apart

}  // namespace

// The situation of a state: its stack count and, per stack, the top kSituationDepth positions with their
// aux (repeat counts reduced to count_class). States in the same situation differ only in how deep they
// nest or exactly how far a count has run — the probe explores one of them.
std::vector<uint64_t> Recognizer::situation(const StackSet& s) const {
  const Grammar& g = *grammar_;
  std::vector<uint64_t> key;
  key.reserve(s.size() + 1);
  for (uint32_t id : s) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    int n = 0;
    for (uint32_t cur = id; cur != kEmptyStack && n < kSituationDepth; cur = nodes_[cur].parent, ++n) {
      const Node& node = nodes_[cur];
      const Grammar::Element el = g.flat[node.pos];
      const uint32_t aux = el.kind == Kind::kRepeat ? count_class(node.aux, g.repeats[el.value]) : node.aux;
      h = (h ^ ((uint64_t{node.pos} << 32) | aux)) * 0xC2B2AE3D27D4EB4Full;
      h ^= h >> 31;
    }
    key.push_back(h);
  }
  std::sort(key.begin(), key.end());
  key.erase(std::unique(key.begin(), key.end()), key.end());
  key.push_back(s.size());
  return key;
}

absl::Status probe_grammar(const std::shared_ptr<const Grammar>& grammar, int32_t max_states, CompileBudget& budget) {
  Recognizer r(grammar);
  auto refuse = [&](absl::string_view prefix, Recognizer::Limit limit) {
    const std::string where =
        prefix.empty() ? "at the start of the output" : absl::StrCat("after the output prefix ", quote_prefix(prefix));
    return absl::InvalidArgumentError(
        absl::StrCat("too ambiguous to track exactly: ", where, " ", r.describe_limit(limit)));
  };
  if (r.limit_hit()) return refuse("", r.last_limit());
  if (r.dead()) return absl::InvalidArgumentError("unsatisfiable: no output can start");
  // States are interned by the recogniser (equal stack sets = equal ids, dense from 0), so `seen[id]`
  // records how each state was first reached: the output prefix is read back along those links.
  struct Seen {
    uint32_t parent;
    uint8_t byte;
  };
  std::vector<Seen> seen;
  const uint32_t start = r.intern_state(r.state());
  seen.push_back({start, 0});
  auto prefix_of = [&](uint32_t id, uint8_t last) {
    std::string p(1, static_cast<char>(last));
    for (; id != start; id = seen[id].parent) p += static_cast<char>(seen[id].byte);
    std::reverse(p.begin(), p.end());
    return p;
  };
  // Every successor is checked against the limits; only states in a situation not met before are
  // explored further. Two frontiers over them, taken in turn: first found first (everything near the
  // start) and most stacks first (ties: first found) — so ambiguity that grows along one long path is
  // reached in about as many expansions as that path is long.
  absl::flat_hash_set<std::vector<uint64_t>> situations = {r.situation(r.state())};
  std::deque<uint32_t> fifo = {start};
  using Ranked = std::pair<size_t, int64_t>;  // (stacks, -id)
  std::priority_queue<Ranked> most;
  most.push({r.state().size(), -int64_t{start}});
  std::vector<bool> expanded = {false};
  const Grammar& g = *grammar;
  int64_t n_examined = 0;
  for (uint64_t turn = 0;; ++turn) {
    uint32_t id = Recognizer::kDeadState;
    bool from_fifo = turn % 4 == 0;
    for (int tries = 0; tries < 2 && id == Recognizer::kDeadState; ++tries, from_fifo = !from_fifo) {
      if (from_fifo) {
        while (!fifo.empty() && expanded[fifo.front()]) fifo.pop_front();
        if (!fifo.empty()) id = fifo.front();
      } else {
        while (!most.empty() && expanded[static_cast<uint32_t>(-most.top().second)]) most.pop();
        if (!most.empty()) id = static_cast<uint32_t>(-most.top().second);
      }
    }
    if (id == Recognizer::kDeadState) return absl::OkStatus();  // every situation was explored
    expanded[id] = true;
    const ByteSet next = r.next_bytes_of(r.interned_state(id));
    const uint64_t work = 1 + r.interned_state(id).size();  // a step costs about one unit per stack
    for (uint8_t b : g.class_representative) {
      if (!next.test(b)) continue;
      if (absl::Status st = budget.tick(work); !st.ok()) return st;
      if (++n_examined > max_states) return absl::OkStatus();
      const uint32_t to = r.advance_interned(id, b);
      if (to == Recognizer::kDeadState) continue;
      if (Recognizer::is_over_limit(to)) {
        return refuse(prefix_of(id, b),
                      to == Recognizer::kOverDepthState ? Recognizer::Limit::kDepth : Recognizer::Limit::kStacks);
      }
      if (to < seen.size()) continue;  // met before
      seen.push_back({id, b});
      expanded.push_back(false);
      if (!situations.insert(r.situation(r.interned_state(to))).second) continue;
      fifo.push_back(to);
      most.push({r.interned_state(to).size(), -int64_t{to}});
    }
  }
}

}  // namespace frost::constrain
