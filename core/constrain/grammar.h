#pragma once
// The grammar IR every constraint kind compiles to (GBNF text, regex, JSON Schema), and the byte-level
// pushdown recogniser that runs it (the shape of llama.cpp's GBNF sampler).
//
// IR: a rule is a list of alternatives; an alternative is a sequence of elements. An element matches
//   - kBytes:  one byte out of a set (a literal byte is a one-byte set);
//   - kClass:  one character out of a code-point class, UTF-8 encoded, as one element: a small byte DFA
//              (surrogates never match), so `.` is one parse, not one per UTF-8 length;
//   - kRule:   a whole rule;
//   - kRepeat: a rule repeated min..max times (max may be unbounded) — a counted repetition without
//              unrolling: the count lives in the stack node, so `x{0,4096}` costs one element, not 4096 rules.
// Repetitions of at most one copy (* + ?) and the frontends' small fixed bounds are lowered to helper
// rules (repeat_internal); larger counts become kRepeat. The recogniser only ever sees bytes, and a token
// that ends in the middle of a multi-byte character is matched as far as it goes.
//
// Recogniser state: a set of stacks. A stack lists the positions still to match, innermost on top; each
// position carries an `aux` word: the iteration count of a kRepeat, the DFA state inside a kClass
// character, 0 elsewhere. The top is always a kBytes or kClass element (rule references and repeats are
// expanded eagerly into one stack per alternative). An empty stack means "the whole root matched": the state
// is accepting. A byte advances every stack whose top can take it; stacks that cannot disappear; no stack
// left = dead. A repeat whose body can match the empty string counts as min = 0, and an iteration that
// consumes nothing is never followed (it adds no new string), so expansion never chains through empty
// iterations.
//
// build() refuses left recursion (a cycle of rule references reachable without consuming a byte, naming the
// rule; a kRepeat references its body), prunes alternatives that can derive no finite string, and refuses
// a grammar whose root derives none ("unsatisfiable"). After pruning, every live stack can still reach
// acceptance, so dead() is exact. Then the probe (probe_grammar, CompileLimits::max_probe_states): from the
// start state it steps the byte-level state space (one representative byte per byte class) and refuses the
// grammar — "too ambiguous to track exactly: after the output prefix "…" more than 512 parses are alive
// (max_stacks)" — when a state it reaches exceeds max_stacks or max_stack_depth; the start state over a
// limit is the first case ("at the start of the output"). It explores breadth-first interleaved with the
// most ambiguous state first (so ambiguity growing along one path is found in about as many steps as the
// path is long), and only from states in a situation not met before (same number of stacks, same top four
// positions of each, repeat counts reduced to where they stand against their bounds): grammars whose states
// differ only in nesting depth or in how far a count has run cost a few hundred states. The probe is
// bounded; what it does not reach — ambiguity that needs an exact deep nesting or a long exact count to
// appear, and nesting deeper than max_stack_depth through recursion (a JSON array can always nest one more
// level) — is met at run time, where the recogniser reports kOverLimit (never a silent truncation) and
// Matcher::health() turns it into an error.
//
// Client-controlled recursion: none. Parsers iterate with explicit stacks and refuse nesting past
// CompileLimits::max_nesting; expansion, compaction and the analyses here are iterative; the only recursion
// left (UTF-8 range splitting) is bounded by the encoding (depth < 10). Every loop over client-sized data
// ticks a CompileBudget, so a compile stops within about a millisecond of its deadline or cancellation.
//
// Costs: one byte step costs one memoised transition per live stack (a hash lookup once seen); kRepeat and
// kClass positions add one word to a stack node and to the canonical key. Compiling is linear in the text
// plus the probe: typically a few milliseconds (a few hundred situations); at most max_probe_states steps
// of at most max_stacks stacks each (~0.1-1 s) for grammars built to defeat it.
#include <array>
#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace frost::constrain {

// Bounds on what a constraint may compile to and on how ambiguous it may be at run time. Every refusal
// names the limit and the value that exceeded it.
struct CompileLimits {
  int64_t max_text_bytes = 1 << 20;  // size of the schema / regex / grammar text
  int32_t max_rules = 20000;         // rules after lowering (groups, small repetitions, tries add rules);
                                     // checked while building: "constraint too large: more than N rules (max_rules)"
  int64_t max_elements = 500000;     // elements over all alternatives after lowering (a class DFA state = 32)
  int32_t max_repeat = 65536;        // largest bound in {m,n}, minItems/maxItems, minLength/maxLength (counters:
                                     // a large bound costs nothing more to compile or run)
  int32_t max_nesting = 256;         // parentheses (grammar) / groups (regex) nested in the text
  int32_t max_stacks = 512;          // parses alive at once (compile-time probe and run time)
  int32_t max_stack_depth = 4096;    // nesting depth of one parse (compile-time probe and run time)
  int32_t max_probe_states = 20000;  // successor states the compile-time ambiguity probe examines; 0 = no probe
  size_t mask_cache_entries = 1024;  // masks cached per (constraint, vocabulary); each n_tokens / 8 bytes
};

// How long a compile may run and who may stop it. Checked in every loop of parsing, lowering, build() and
// the probe (CompileBudget below). Past the deadline: DEADLINE_EXCEEDED "<kind>: compile stopped after its
// time budget"; `*cancelled` true: CANCELLED "<kind>: compile cancelled". `cancelled` must outlive the
// compile.
struct CompileControl {
  absl::Time deadline = absl::InfiniteFuture();
  const std::atomic<bool>* cancelled = nullptr;
};

// Work counter against a CompileControl: tick(n) adds n units of work (about a microsecond's worth or
// less each); the first tick and every 1024 units read the clock and the flag (about 20 ns), so a loop
// that ticks for its work stops within about a millisecond, and a compile cancelled before it starts stops
// in its first loop.
class CompileBudget {
 public:
  explicit CompileBudget(const CompileControl& control) : control_(control) {}
  // OK, or the stop (messages without the "<kind>: " prefix, which the frontend adds); sticky once stopped.
  absl::Status tick(uint64_t units = 1) {
    const uint64_t before = n_ticks_;
    n_ticks_ += units;
    return before != 0 && (before >> 10) == (n_ticks_ >> 10) && stop_.ok() ? absl::OkStatus() : check();
  }
  absl::Status check();

 private:
  CompileControl control_;
  uint64_t n_ticks_ = 0;
  absl::Status stop_;
};

using ByteSet = std::bitset<256>;
// Sorted, non-overlapping inclusive code point ranges.
using CodepointRanges = std::vector<std::pair<char32_t, char32_t>>;

// One element of an alternative while building.
struct Elem {
  enum class Kind : uint8_t { kBytes, kRule, kRepeat, kClass };
  static constexpr uint32_t kUnbounded = 0xffffffffu;
  Kind kind = Kind::kBytes;
  ByteSet bytes;      // kBytes
  uint32_t rule = 0;  // kRule, kRepeat: the rule (repeat body); kClass: the builder's class id
  uint32_t min = 0;   // kRepeat
  uint32_t max = 0;   // kRepeat; kUnbounded = no upper bound
};
using Seq = std::vector<Elem>;

// A code-point class as a byte DFA over its UTF-8 encodings. State 0 is the start; every state but the
// start is inside a multi-byte character.
struct CharClass {
  static constexpr uint16_t kDead = 0xffff, kDone = 0xfffe;  // no such character / the character is complete
  std::vector<uint16_t> next;     // [state * 256 + byte]: kDead, kDone or the next state
  std::vector<ByteSet> live;      // per state: the bytes that do not lead to kDead
  std::vector<uint8_t> min_rest;  // per state: fewest bytes that complete the character
  size_t n_states() const { return live.size(); }
};

// The compiled, immutable grammar. Alternatives are stored flat: each is a run of elements in `flat`
// ending with a kEnd element, so a position in the grammar is one index into `flat`.
struct Grammar {
  struct Element {
    enum class Kind : uint8_t { kEnd, kBytes, kRule, kRepeat, kClass };
    Kind kind = Kind::kEnd;
    uint32_t value = 0;  // kBytes: index into byte_sets; kRule: rule id; kRepeat: index into repeats;
                         // kClass: index into classes
  };
  struct Repeat {
    uint32_t rule = 0;  // the body
    uint32_t min = 0;   // 0 when the body can match the empty string (empty iterations pad the count)
    uint32_t max = 0;   // Elem::kUnbounded: no bound; the count then stops at `min`
    uint64_t body_min_bytes = 0;  // fewest bytes of one iteration
  };
  std::vector<std::string> rule_names;
  std::vector<std::vector<uint32_t>> rule_alts;  // per rule, the start index of each alternative in flat
  std::vector<Element> flat;
  std::vector<ByteSet> byte_sets;
  std::vector<Repeat> repeats;
  std::vector<CharClass> classes;
  std::vector<uint64_t> rest_min;  // per flat position: fewest bytes that finish its alternative from there
  // Bytes that every element treats alike (every byte set and class DFA row agrees on them) share a class;
  // the probe steps one representative byte per class.
  std::array<uint8_t, 256> byte_class{};
  std::vector<uint8_t> class_representative;  // per byte class: the byte the probe uses (printable if any)
  uint32_t root = 0;
  int32_t max_stacks = 512;
  int32_t max_stack_depth = 4096;

  // The rules in GBNF-like text, for debugging and error messages.
  std::string to_string() const;
  // Bytes held by the grammar (elements, byte sets, class DFAs, rule tables, names): what a cache of
  // compiled grammars should count. Approximate (allocator overhead is not counted) but never an
  // underestimate of the payload.
  size_t memory_bytes() const;
};

// Assembles rules, then lowers them into a Grammar. Not thread-safe; one per compilation. Size limits
// (max_rules, max_elements) are checked as rules and alternatives are added: the first one passed, or a
// stop of the CompileControl, becomes status() and stays; frontends call tick() in their loops and give
// up as soon as it is not OK.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(const CompileLimits& limits, const CompileControl& control = {})
      : limits_(limits), budget_(control) {}
  const CompileLimits& limits() const { return limits_; }

  // A new rule named `name` (made unique with a numeric suffix when taken; O(1) amortised).
  uint32_t add_rule(absl::string_view name);
  // The rule called exactly `name`, created empty when absent (GBNF forward references).
  uint32_t rule_named(absl::string_view name);
  bool has_rule(absl::string_view name) const { return by_name_.contains(name); }
  const std::string& name(uint32_t rule) const { return names_[rule]; }
  void add_alternative(uint32_t rule, Seq seq);
  size_t n_alternatives(uint32_t rule) const { return alts_[rule].size(); }

  static Elem byte(uint8_t b);
  static Elem bytes(const ByteSet& set);
  static Elem ref(uint32_t rule);
  // Appends the bytes of `s` as one-byte elements.
  static void append_literal(Seq& seq, absl::string_view s);

  // One element matching one character out of `ranges` (UTF-8 encoded; surrogates never match): a byte
  // set when all are ASCII, else a kClass element (equal classes share one DFA). Empty ranges give an
  // element that matches nothing.
  Elem codepoints(CodepointRanges ranges);
  // An element matching `body` repeated min..max times (max < 0: unbounded): a helper rule when at most
  // one copy is needed (* + ?), else a kRepeat (or, with set_unrolled_repeats, the unrolled helper rules).
  // Refuses bounds over limits.max_repeat.
  absl::StatusOr<Elem> repeat(const Seq& body, int64_t min, int64_t max, absl::string_view hint);
  // Unrolled repetition — nested optionals ( unit ( unit ( ... )? )? )? — without the max_repeat check, for
  // the small fixed bounds frontends use internally; also the reference twin of kRepeat in tests.
  uint32_t repeat_internal(const Seq& body, int64_t min, int64_t max, absl::string_view hint);
  // Tests: lower every repeat() through repeat_internal (the reference the counters are checked against).
  void set_unrolled_repeats(bool on) { unrolled_repeats_ = on; }
  // A rule with `alts` as its alternatives (for ( a | b ) groups).
  uint32_t group(std::vector<Seq> alts, absl::string_view hint);
  // A sequence matching exactly one of `words` (duplicates merged): a trie, so however many words there are
  // one parse survives each byte, and one stack per distinct next byte is alive at a branch. Iterative.
  Seq literal_trie(std::vector<std::string> words, absl::string_view hint);

  // OK, or the first limit passed / the CompileControl stop (sticky).
  const absl::Status& status() const { return status_; }
  // status() after counting one unit of work against the CompileControl.
  const absl::Status& tick();

  // Checks left recursion, prunes unproductive alternatives, refuses an unsatisfiable root, then runs the
  // ambiguity probe. Messages have no "<kind>: " prefix (the frontend adds it); codes: INVALID_ARGUMENT,
  // or the CompileControl's DEADLINE_EXCEEDED / CANCELLED.
  absl::StatusOr<std::shared_ptr<const Grammar>> build(uint32_t root);

 private:
  void count_elements(int64_t n);
  void count_rule();

  CompileLimits limits_;
  CompileBudget budget_;
  absl::Status status_;
  bool unrolled_repeats_ = false;
  int64_t n_elements_ = 0;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> alts_;
  absl::flat_hash_map<std::string, uint32_t> by_name_;
  absl::flat_hash_map<std::string, uint32_t> next_suffix_;  // name -> last numeric suffix tried
  absl::flat_hash_map<std::string, uint32_t> class_ids_;    // canonical ranges -> index into classes_
  std::vector<CharClass> classes_;
};

// Decodes one UTF-8 code point of `s` at `*pos` and advances `*pos`; false (pos unchanged) when the
// bytes there are not well-formed UTF-8.
bool decode_utf8(absl::string_view s, size_t* pos, char32_t* cp);

// Sorts and merges `ranges` in place.
void normalize_ranges(CodepointRanges& ranges);
// All code points (U+0000..U+10FFFF) not in `ranges` (which must be normalized).
CodepointRanges complement_ranges(const CodepointRanges& ranges);
// A byte set in GBNF-like text: "x" for one printable byte, else [a-z\x80-\xBF] ranges.
std::string describe_bytes(const ByteSet& set);
// Up to `max_bytes` of `bytes`, C-escaped, in quotes; longer text ends with "..." after the quote.
std::string quote_prefix(absl::string_view bytes, size_t max_bytes = 40);

// Runs a Grammar over bytes. A StackSet is a state; it is only meaningful with the Recognizer (its arena)
// that produced it. Not thread-safe; one per request. Copyable (the copy owns its own arena).
class Recognizer {
 public:
  using StackSet = std::vector<uint32_t>;  // sorted ids of interned stacks; kEmptyStack = completed
  static constexpr uint32_t kEmptyStack = 0xffffffffu;
  enum class Advance { kOk, kDead, kOverLimit };
  // Which limit an advance hit: kStacks = more than max_stacks parses alive (or an expansion too large to
  // finish), kDepth = a parse deeper than max_stack_depth.
  enum class Limit : uint8_t { kNone, kStacks, kDepth };

  explicit Recognizer(std::shared_ptr<const Grammar> grammar);

  // The current state; changed only by advance() / advance_bytes() / reset() / set_state(), and renumbered
  // (same meaning) by compact().
  const StackSet& state() const { return state_; }
  void set_state(StackSet s) { state_ = std::move(s); }
  void reset();

  // Feeds one byte. Returns false when no stack can take it; the state is then dead (empty).
  bool advance(uint8_t byte);
  // Feeds bytes until one fails; returns false (state dead) when any byte fails.
  bool advance_bytes(absl::string_view bytes);
  bool accepting() const { return is_accepting(state_); }
  bool dead() const { return state_.empty(); }
  // True once a limit (max_stacks, max_stack_depth) stopped a step of this recogniser (reset() included);
  // the count lets a caller tell whether one particular walk hit it, last_limit() which limit it was.
  bool limit_hit() const { return n_limit_hits_ > 0; }
  int64_t n_limit_hits() const { return n_limit_hits_; }
  Limit last_limit() const { return last_limit_; }
  // "more than 512 parses are alive (max_stacks)" / "a parse nests deeper than 4096 (max_stack_depth)".
  std::string describe_limit(Limit limit) const;
  // The bytes that some stack of the current state (of `s`) can take next.
  ByteSet next_bytes() const { return next_bytes_of(state_); }
  ByteSet next_bytes_of(const StackSet& s) const;
  // Accepting and no byte can follow: the output is complete.
  bool must_end() const { return state_.size() == 1 && state_[0] == kEmptyStack; }

  // Advances an explicit state by one byte, leaving the current one alone (it does intern into the arena and
  // memo). `out` is overwritten (cleared on kOverLimit).
  Advance advance_from(const StackSet& from, uint8_t byte, StackSet* out);
  static bool is_accepting(const StackSet& s) { return !s.empty() && s.back() == kEmptyStack; }
  // Interned states, for walks that revisit the same states (the token-mask trie walk): one hash lookup
  // per (state, byte) once seen. Ids stay valid until reset() or compact().
  static constexpr uint32_t kDeadState = 0xffffffffu, kOverLimitState = 0xfffffffeu,
                            kOverDepthState = 0xfffffffdu;
  static bool is_over_limit(uint32_t state_id) { return state_id == kOverLimitState || state_id == kOverDepthState; }
  uint32_t intern_state(const StackSet& s);
  const StackSet& interned_state(uint32_t id) const { return sets_[id]; }
  size_t n_interned_states() const { return sets_.size(); }
  // The interned state after `byte`, or kDeadState / kOverLimitState (max_stacks) / kOverDepthState.
  uint32_t advance_interned(uint32_t id, uint8_t byte);
  // Fewest bytes that complete the output from `s` (UINT64_MAX when dead) — lets a caller steer to an end.
  uint64_t min_bytes_to_accept(const StackSet& s) const;
  // A key equal for equal states across recognisers of the same grammar (the mask-cache key).
  std::string canonical_key(const StackSet& s) const;
  // Drops arena nodes not reachable from the current state (call between tokens when the arena is big).
  void compact();
  // Interned stack nodes, states and memoised transitions: what compact() can reclaim.
  size_t arena_size() const { return nodes_.size() + memo_pool_.size() + sets_.size() + set_memo_.size(); }
  const Grammar& grammar() const { return *grammar_; }

 private:
  friend absl::Status probe_grammar(const std::shared_ptr<const Grammar>& grammar, int32_t max_states,
                                    CompileBudget& budget);
  std::vector<uint64_t> situation(const StackSet& s) const;  // the probe's abstraction of a state
  struct Node {
    uint32_t pos;     // index into grammar.flat
    uint32_t parent;  // stack below, kEmptyStack at the bottom
    uint32_t depth;
    uint32_t aux;     // kRepeat: iterations done; kClass: DFA state; else 0
  };
  struct NodeKey {
    uint32_t pos, parent, aux;
    bool operator==(const NodeKey& o) const { return pos == o.pos && parent == o.parent && aux == o.aux; }
    template <typename H>
    friend H AbslHashValue(H h, const NodeKey& k) {  // one 64-bit word: aux is 0 on most positions
      return H::combine(std::move(h), ((uint64_t{k.pos} << 32) | k.parent) ^ (uint64_t{k.aux} * 0x9E3779B97F4A7C15ull));
    }
  };
  struct Transition {
    uint32_t begin, len;  // a sorted run of memo_pool_; len == kOverLimit: a limit was hit, begin = Limit
  };
  static constexpr uint32_t kOverLimit = 0xffffffffu;
  static constexpr uint32_t kNoNode = 0xfffffffeu;   // intern() refused: deeper than max_stack_depth
  static constexpr uint32_t kUnblock = 0xfffffffdu;  // expansion work item: leave a repeat's body
  void clear_interned();  // the interned states and memos over nodes_
  Transition transition(uint32_t stack, uint8_t byte);
  uint32_t intern(uint32_t pos, uint32_t parent, uint32_t aux);
  // The stack after the element at the top of `node` is complete (kNoNode when too deep).
  uint32_t continuation(const Node& node);
  // Expands rule references and repeats at the top of stack `s` into `out` (iteratively); the limit hit,
  // kNone when none.
  Limit expand(uint32_t s, StackSet* out);
  void finish(StackSet* out) const;
  void note_limit(Limit limit) {
    ++n_limit_hits_;
    last_limit_ = limit;
  }

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<NodeKey, uint32_t> index_;
  absl::flat_hash_map<uint64_t, Transition> memo_;  // (stack << 8 | byte) -> stacks after the byte
  std::vector<uint32_t> memo_pool_;
  std::vector<StackSet> sets_;
  absl::flat_hash_map<StackSet, uint32_t> set_index_;
  absl::flat_hash_map<uint64_t, uint32_t> set_memo_;  // (state id << 8 | byte) -> state id after the byte
  StackSet scratch_;
  // Expansion scratch, inline: most expansions touch a few nodes, and a fresh recogniser (one per request,
  // one per uncached mask in tests) should not pay heap allocations for them.
  absl::InlinedVector<uint32_t, 64> work_;
  absl::InlinedVector<uint32_t, 8> blocked_;
  StackSet state_;
  int64_t n_limit_hits_ = 0;
  Limit last_limit_ = Limit::kNone;
};

// The ambiguity probe build() runs (exposed for tests): explores `grammar` from its start state, examining
// at most `max_states` successor states, within the budget; INVALID_ARGUMENT "too ambiguous to track
// exactly: at the start of the output / after the output prefix \"…\" more than 512 parses are alive
// (max_stacks)" when a state exceeds a limit, "unsatisfiable: no output can start" when the start state is
// dead. Every successor it computes is checked; it explores further only from states in a situation not
// met before (same stack count and same top four positions of every stack, repeat counts reduced to where
// they stand against their bounds), so grammars whose states differ only by nesting depth or by how far a
// count has run cost a few hundred states, not the budget. Ambiguity that needs an exact deep nesting or
// long exact count to appear may be left to the run time (Matcher::health()).
absl::Status probe_grammar(const std::shared_ptr<const Grammar>& grammar, int32_t max_states, CompileBudget& budget);

}  // namespace frost::constrain
