// GrammarBuilder::build(): from the rules a front end assembled to the immutable Grammar — limits, shortest
// strings (productive rules, pruning), nullable rules, left recursion, flattening, counters, class DFAs, byte
// classes and the fewest bytes to finish from each position (grammar.h).
#include <algorithm>
#include <array>
#include <functional>
#include <queue>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/constrain/grammar.h"

namespace frost::constrain {
namespace {

constexpr uint64_t kUnsettled = uint64_t{1} << 62;

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > (kUnsettled - 1) / b ? kUnsettled - 1 : a * b;
}

}  // namespace

namespace {

// Byte classes (Grammar::byte_class): bytes whose membership in every byte set and whose transition in
// every class DFA row agree. Each byte accumulates two independent 64-bit hashes of that signature.
void compute_byte_classes(Grammar& g) {
  std::array<uint64_t, 256> h1{}, h2{};
  auto mix = [&](int b, uint64_t v) {
    h1[b] = (h1[b] ^ v) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    h2[b] = ((h2[b] + v + 0x7F4A7C15ull) * 0xC2B2AE3D27D4EB4Full) ^ (h2[b] >> 29);
  };
  for (const ByteSet& s : g.byte_sets) {
    for (int b = 0; b < 256; ++b) mix(b, s.test(b) ? 1 : 0);
  }
  for (const CharClass& c : g.classes) {
    for (size_t k = 0; k < c.next.size(); ++k) mix(static_cast<int>(k & 255), c.next[k] + 2u);
  }
  // Representative: a lowercase letter if the class has one, else a digit, an uppercase letter, printable
  // ASCII, then the smallest byte — so probe messages read like text.
  auto score = [](int b) {
    if (b >= 'a' && b <= 'z') return 0;
    if (b >= '0' && b <= '9') return 1;
    if (b >= 'A' && b <= 'Z') return 2;
    if (b >= 0x20 && b < 0x7F) return 3;
    return 4;
  };
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, uint8_t> ids;
  g.class_representative.clear();
  for (int b = 0; b < 256; ++b) {
    auto [it, inserted] = ids.emplace(std::make_pair(h1[b], h2[b]), static_cast<uint8_t>(ids.size()));
    g.byte_class[b] = it->second;
    if (inserted) {
      g.class_representative.push_back(static_cast<uint8_t>(b));
    } else if (score(b) < score(g.class_representative[it->second])) {
      g.class_representative[it->second] = static_cast<uint8_t>(b);
    }
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::build(uint32_t root) {
  if (!status_.ok()) return status_;
  const size_t n = names_.size();
  // Shortest string of each rule (Knuth's generalisation of Dijkstra to grammars): an alternative counts
  // the rule references not yet settled and sums the lengths of those that are; when the count reaches
  // zero the alternative offers its rule a length, and the smallest offer settles the rule. A rule never
  // settled derives no finite string (unproductive). A repeat with min > 0 waits for its body and adds
  // min times its length; with min 0 it derives "" whatever its body.
  struct AltRef {
    uint32_t rule, alt, times;
  };
  std::vector<std::vector<AltRef>> users(n);
  std::vector<std::vector<int32_t>> missing(n);
  std::vector<std::vector<uint8_t>> impossible(n);  // an element that matches nothing (empty set or class)
  std::vector<std::vector<uint64_t>> partial(n);
  std::vector<uint64_t> min_len(n, kUnsettled);
  using Offer = std::pair<uint64_t, uint32_t>;
  std::priority_queue<Offer, std::vector<Offer>, std::greater<Offer>> offers;
  for (uint32_t r = 0; r < n; ++r) {
    missing[r].resize(alts_[r].size());
    impossible[r].resize(alts_[r].size());
    partial[r].resize(alts_[r].size());
    for (uint32_t a = 0; a < alts_[r].size(); ++a) {
      if (!tick().ok()) return status_;
      for (const Elem& e : alts_[r][a]) {
        switch (e.kind) {
          case Elem::Kind::kRule:
            users[e.rule].push_back({r, a, 1});
            ++missing[r][a];
            break;
          case Elem::Kind::kRepeat:
            if (e.min > 0) {
              users[e.rule].push_back({r, a, e.min});
              ++missing[r][a];
            }
            break;
          case Elem::Kind::kBytes:
            if (e.bytes.none()) impossible[r][a] = 1;
            ++partial[r][a];
            break;
          case Elem::Kind::kClass:
            if (classes_[e.rule].live[0].none()) impossible[r][a] = 1;
            partial[r][a] += classes_[e.rule].min_rest[0];
            break;
        }
      }
      if (missing[r][a] == 0 && !impossible[r][a]) offers.push({partial[r][a], r});
    }
  }
  while (!offers.empty()) {
    const auto [len, r] = offers.top();
    offers.pop();
    if (min_len[r] != kUnsettled) continue;
    min_len[r] = len;
    for (const AltRef& u : users[r]) {
      partial[u.rule][u.alt] = std::min<uint64_t>(partial[u.rule][u.alt] + saturating_mul(len, u.times), kUnsettled - 1);
      if (--missing[u.rule][u.alt] == 0 && !impossible[u.rule][u.alt] && min_len[u.rule] == kUnsettled) {
        offers.push({partial[u.rule][u.alt], u.rule});
      }
    }
  }
  if (min_len[root] == kUnsettled) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsatisfiable: rule '", names_[root], "' matches no finite string"));
  }
  // Keep only alternatives whose elements are all productive: every stack can then finish.
  std::vector<std::vector<const Seq*>> kept(n);
  std::vector<std::vector<uint8_t>> is_kept(n);
  for (uint32_t r = 0; r < n; ++r) {
    is_kept[r].resize(alts_[r].size());
    for (uint32_t a = 0; a < alts_[r].size(); ++a) {
      if (missing[r][a] == 0 && !impossible[r][a]) {
        kept[r].push_back(&alts_[r][a]);
        is_kept[r][a] = 1;
      }
    }
  }
  // Nullable rules (derive the empty string), by a worklist over the kept alternatives: an alternative
  // waits for each rule it references (a repeat with min 0 is nullable outright); a byte or class element
  // makes it non-nullable.
  std::vector<bool> nullable(n, false);
  std::vector<uint32_t> queue;
  std::vector<std::vector<int32_t>> pending(n);
  for (uint32_t r = 0; r < n; ++r) {
    pending[r].assign(alts_[r].size(), -1);  // -1: never nullable (or pruned)
    for (uint32_t a = 0; a < alts_[r].size(); ++a) {
      if (!is_kept[r][a]) continue;
      int32_t wait = 0;
      bool bytes = false;
      for (const Elem& e : alts_[r][a]) {
        if (e.kind == Elem::Kind::kBytes || e.kind == Elem::Kind::kClass) bytes = true;
        if (e.kind == Elem::Kind::kRule || (e.kind == Elem::Kind::kRepeat && e.min > 0)) ++wait;
      }
      if (bytes) continue;
      pending[r][a] = wait;
      if (wait == 0 && !nullable[r]) {
        nullable[r] = true;
        queue.push_back(r);
      }
    }
  }
  while (!queue.empty()) {
    const uint32_t u = queue.back();
    queue.pop_back();
    for (const AltRef& ref : users[u]) {
      int32_t& p = pending[ref.rule][ref.alt];
      if (p > 0 && --p == 0 && !nullable[ref.rule]) {
        nullable[ref.rule] = true;
        queue.push_back(ref.rule);
      }
    }
  }
  auto elem_nullable = [&](const Elem& e) {
    return (e.kind == Elem::Kind::kRule && nullable[e.rule]) ||
           (e.kind == Elem::Kind::kRepeat && (e.min == 0 || nullable[e.rule]));
  };
  // Left recursion: a cycle of references reachable without consuming a byte would make expansion loop.
  // A repeat references its body.
  std::vector<std::vector<uint32_t>> left(n);
  for (uint32_t r = 0; r < n; ++r) {
    for (const Seq* s : kept[r]) {
      for (const Elem& e : *s) {
        if (e.kind != Elem::Kind::kRule && e.kind != Elem::Kind::kRepeat) break;
        left[r].push_back(e.rule);
        if (!elem_nullable(e)) break;
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
  g->classes = classes_;
  g->root = root;
  g->max_stacks = limits_.max_stacks;
  g->max_stack_depth = limits_.max_stack_depth;
  std::unordered_map<ByteSet, uint32_t> set_ids;
  for (uint32_t r = 0; r < n; ++r) {
    if (!tick().ok()) return status_;
    for (const Seq* s : kept[r]) {
      g->rule_alts[r].push_back(static_cast<uint32_t>(g->flat.size()));
      for (const Elem& e : *s) {
        Grammar::Element el;
        switch (e.kind) {
          case Elem::Kind::kRule:
            el = {Grammar::Element::Kind::kRule, e.rule};
            break;
          case Elem::Kind::kClass:
            el = {Grammar::Element::Kind::kClass, e.rule};
            break;
          case Elem::Kind::kRepeat: {
            Grammar::Repeat rep;
            rep.rule = e.rule;
            rep.min = nullable[e.rule] ? 0 : e.min;  // empty iterations can pad any count
            rep.max = e.max;
            rep.body_min_bytes = min_len[e.rule] == kUnsettled ? 0 : min_len[e.rule];
            el = {Grammar::Element::Kind::kRepeat, static_cast<uint32_t>(g->repeats.size())};
            g->repeats.push_back(rep);
            break;
          }
          case Elem::Kind::kBytes: {
            auto [it, inserted] = set_ids.emplace(e.bytes, static_cast<uint32_t>(g->byte_sets.size()));
            if (inserted) g->byte_sets.push_back(e.bytes);
            el = {Grammar::Element::Kind::kBytes, it->second};
            break;
          }
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
    uint64_t here = 0;
    switch (el.kind) {
      case Grammar::Element::Kind::kEnd: continue;
      case Grammar::Element::Kind::kBytes: here = 1; break;
      case Grammar::Element::Kind::kRule: here = min_len[el.value]; break;
      case Grammar::Element::Kind::kClass: here = g->classes[el.value].min_rest[0]; break;
      case Grammar::Element::Kind::kRepeat: {
        const Grammar::Repeat& rep = g->repeats[el.value];
        here = saturating_mul(rep.min, rep.body_min_bytes);
        break;
      }
    }
    g->rest_min[p] = std::min<uint64_t>(here + g->rest_min[p + 1], kUnsettled - 1);
  }
  compute_byte_classes(*g);
  std::shared_ptr<const Grammar> out = std::move(g);
  if (limits_.max_probe_states > 0) {
    absl::Status st = probe_grammar(out, limits_.max_probe_states, budget_);
    if (!st.ok()) {
      if (st.code() != absl::StatusCode::kInvalidArgument) status_ = st;
      return st;
    }
  }
  return out;
}

}  // namespace frost::constrain
