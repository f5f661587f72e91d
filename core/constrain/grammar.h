#pragma once
// The grammar IR every constraint kind compiles to (GBNF text, regex, JSON Schema), and the byte-level
// pushdown recogniser that runs it (the shape of llama.cpp's GBNF sampler).
//
// IR: a rule is a list of alternatives; an alternative is a sequence of elements; an element matches one
// byte out of a set (a literal byte is a one-byte set) or a whole rule. Repetition (* + ? {m,n}) is lowered
// to helper rules by GrammarBuilder, and character classes over code points are lowered to alternatives of
// UTF-8 byte sequences — so the recogniser only ever sees bytes, and a token that ends in the middle of a
// multi-byte character is matched as far as it goes.
//
// Recogniser state: a set of stacks. A stack lists the positions still to match, innermost on top; the top
// is always a byte-set element (rule references are expanded eagerly into one stack per alternative). An
// empty stack means "the whole root matched": the state is accepting. A byte advances every stack whose top
// set holds it; stacks that cannot take the byte disappear; no stack left = dead.
//
// Build() refuses left recursion (a cycle of rule references reachable without consuming a byte, naming the
// rule), prunes alternatives that can derive no finite string, and refuses a grammar whose root derives none
// ("unsatisfiable"). After pruning, every live stack can still reach acceptance, so dead() is exact.
#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace frost::constrain {

// Bounds on what a constraint may compile to and on how ambiguous it may be at run time. Every refusal
// names the limit and the value that exceeded it.
struct CompileLimits {
  int64_t max_text_bytes = 1 << 20;  // size of the schema / regex / grammar text
  int32_t max_rules = 20000;         // rules after lowering (repetition and classes add rules)
  int64_t max_elements = 500000;     // elements over all alternatives after lowering
  int32_t max_repeat = 4096;         // largest bound in {m,n}, minItems/maxItems, minLength/maxLength
  int32_t max_stacks = 512;          // run time: stacks alive at once; past it the branch is dropped
  int32_t max_stack_depth = 4096;    // run time: nesting depth of one stack; past it the branch is dropped
  size_t mask_cache_entries = 1024;  // masks cached per (constraint, vocabulary); each n_tokens / 8 bytes
};

using ByteSet = std::bitset<256>;
// Sorted, non-overlapping inclusive code point ranges.
using CodepointRanges = std::vector<std::pair<char32_t, char32_t>>;

// One element of an alternative while building.
struct Elem {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  ByteSet bytes;      // kBytes
  uint32_t rule = 0;  // kRule
};
using Seq = std::vector<Elem>;

// The compiled, immutable grammar. Alternatives are stored flat: each is a run of elements in `flat`
// ending with a kEnd element, so a position in the grammar is one index into `flat`.
struct Grammar {
  struct Element {
    enum class Kind : uint8_t { kEnd, kBytes, kRule };
    Kind kind = Kind::kEnd;
    uint32_t value = 0;  // kBytes: index into byte_sets; kRule: rule id
  };
  std::vector<std::string> rule_names;
  std::vector<std::vector<uint32_t>> rule_alts;  // per rule, the start index of each alternative in flat
  std::vector<Element> flat;
  std::vector<ByteSet> byte_sets;
  std::vector<uint64_t> rest_min;  // per flat position: fewest bytes that finish its alternative from there
  uint32_t root = 0;
  int32_t max_stacks = 512;
  int32_t max_stack_depth = 4096;

  // The rules in GBNF-like text, for debugging and error messages.
  std::string to_string() const;
};

// Assembles rules, then lowers them into a Grammar. Not thread-safe; one per compilation.
class GrammarBuilder {
 public:
  // A new rule named `name` (made unique with a numeric suffix when taken).
  uint32_t add_rule(absl::string_view name);
  // The rule called exactly `name`, created empty when absent (GBNF forward references).
  uint32_t rule_named(absl::string_view name);
  bool has_rule(absl::string_view name) const { return by_name_.contains(name); }
  const std::string& name(uint32_t rule) const { return names_[rule]; }
  void add_alternative(uint32_t rule, Seq seq) { alts_[rule].push_back(std::move(seq)); }
  size_t n_alternatives(uint32_t rule) const { return alts_[rule].size(); }

  static Elem byte(uint8_t b);
  static Elem bytes(const ByteSet& set);
  static Elem ref(uint32_t rule);
  // Appends the bytes of `s` as one-byte elements.
  static void append_literal(Seq& seq, absl::string_view s);

  // One element matching one character out of `ranges` (UTF-8 encoded; surrogates never match): a byte
  // set when all are ASCII, else a reference to a helper rule of byte-sequence alternatives (shared by
  // equal classes). Empty ranges give an element that matches nothing.
  Elem codepoints(CodepointRanges ranges);
  // A rule matching `body` repeated min..max times (max < 0: unbounded). Refuses bounds over
  // limits.max_repeat.
  absl::StatusOr<uint32_t> repeat(const Seq& body, int64_t min, int64_t max, absl::string_view hint);
  // The same without the max_repeat check, for the small fixed bounds frontends use internally.
  uint32_t repeat_internal(const Seq& body, int64_t min, int64_t max, absl::string_view hint);
  // A rule with `alts` as its alternatives (for ( a | b ) groups).
  uint32_t group(std::vector<Seq> alts, absl::string_view hint);

  // Checks limits and left recursion, prunes unproductive alternatives, refuses an unsatisfiable root.
  absl::StatusOr<std::shared_ptr<const Grammar>> build(uint32_t root) const;

  explicit GrammarBuilder(const CompileLimits& limits) : limits_(limits) {}
  const CompileLimits& limits() const { return limits_; }

 private:
  CompileLimits limits_;
  std::vector<std::string> names_;
  std::vector<std::vector<Seq>> alts_;
  absl::flat_hash_map<std::string, uint32_t> by_name_;
  absl::flat_hash_map<std::string, uint32_t> class_rules_;  // canonical ranges -> helper rule
};

// Decodes one UTF-8 code point of `s` at `*pos` and advances `*pos`; false (pos unchanged) when the
// bytes there are not well-formed UTF-8.
bool decode_utf8(absl::string_view s, size_t* pos, char32_t* cp);

// Sorts and merges `ranges` in place.
void normalize_ranges(CodepointRanges& ranges);
// All code points (U+0000..U+10FFFF) not in `ranges` (which must be normalized).
CodepointRanges complement_ranges(const CodepointRanges& ranges);

// Runs a Grammar over bytes. A StackSet is a state; it is only meaningful with the Recognizer (its arena)
// that produced it. Not thread-safe; one per request. Copyable (the copy owns its own arena).
class Recognizer {
 public:
  using StackSet = std::vector<uint32_t>;  // sorted ids of interned stacks; kEmptyStack = completed
  static constexpr uint32_t kEmptyStack = 0xffffffffu;
  enum class Step { kOk, kDead, kOverLimit };

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
  // True once a limit (max_stacks, max_stack_depth) dropped a branch in this recogniser; the count lets
  // a caller tell whether one particular walk hit it.
  bool limit_hit() const { return n_limit_hits_ > 0; }
  int64_t n_limit_hits() const { return n_limit_hits_; }
  // The bytes that some stack of the current state can take next.
  ByteSet next_bytes() const;
  // Accepting and no byte can follow: the output is complete.
  bool must_end() const { return state_.size() == 1 && state_[0] == kEmptyStack; }

  // Steps an explicit state, leaving the current one alone (it does intern into the arena and memo).
  // `out` is overwritten.
  Step step(const StackSet& from, uint8_t byte, StackSet* out);
  static bool is_accepting(const StackSet& s) { return !s.empty() && s.back() == kEmptyStack; }
  // Interned states, for walks that revisit the same states (the token-mask trie walk): one hash lookup
  // per (state, byte) once seen. Ids stay valid until reset() or compact().
  static constexpr uint32_t kDeadState = 0xffffffffu, kOverLimitState = 0xfffffffeu;
  uint32_t intern_state(const StackSet& s);
  const StackSet& interned_state(uint32_t id) const { return sets_[id]; }
  // The interned state after `byte`, or kDeadState / kOverLimitState.
  uint32_t step_interned(uint32_t id, uint8_t byte);
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
  void clear_interned();  // the interned states and memos over nodes_
  struct Node {
    uint32_t pos;     // index into grammar.flat
    uint32_t parent;  // stack below, kEmptyStack at the bottom
    uint32_t depth;
  };
  struct Transition {
    uint32_t begin, len;  // a sorted run of memo_pool_; len == kOverLimit when a limit was hit
  };
  static constexpr uint32_t kOverLimit = 0xffffffffu;
  Transition transition(uint32_t stack, uint8_t byte);
  uint32_t intern(uint32_t pos, uint32_t parent);
  // Expands rule references at the top of stack `s` into `out`; false when a limit was hit.
  bool expand(uint32_t s, StackSet* out, int guard);
  void finish(StackSet* out) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  absl::flat_hash_map<uint64_t, Transition> memo_;  // (stack << 8 | byte) -> stacks after the byte
  std::vector<uint32_t> memo_pool_;
  std::vector<StackSet> sets_;
  absl::flat_hash_map<StackSet, uint32_t> set_index_;
  absl::flat_hash_map<uint64_t, uint32_t> set_memo_;  // (state id << 8 | byte) -> state id after the byte
  StackSet scratch_;
  StackSet state_;
  int64_t n_limit_hits_ = 0;
};

}  // namespace frost::constrain
