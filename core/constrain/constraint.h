#pragma once
// Constrained decoding (structured output): the public entry of core/constrain/.
//
// A request may ask that its output match a constraint; the engine compiles it once
// (compile_constraint), makes one Matcher per sequence (CompiledConstraint::matcher), and at each decode
// step masks the logits with Matcher::allowed() before sampling, then calls accept_token() with the token
// it sampled; it ends the sequence when EOS is sampled or must_end() says nothing can follow.
//
// Kinds (ConstraintSpec::text is):
//   kJsonSchema  a JSON Schema document; the output is one JSON value it admits (json_schema.h lists the
//                keywords honoured, ignored and refused, and the whitespace rule: at most one space, or one
//                newline plus up to 16 spaces, after `{ [ : ,` and after members/items — bounded, so a
//                model cannot loop on whitespace).
//   kJsonObject  ignored; the output is any JSON object (same whitespace rule).
//   kRegex       a regular expression the whole output must match (regex.h: the supported subset).
//   kGrammar     a grammar in llama.cpp's GBNF dialect, start rule `root` (gbnf.h).
//   kNone        nothing to compile: refused (callers skip constraints of this kind).
// Everything compiles to one byte-level grammar IR (grammar.h); matching is per byte, so tokens that end
// inside a multi-byte UTF-8 character or span structural boundaries (`",`, `":"`) are handled exactly.
//
// Refusals are INVALID_ARGUMENT: syntax errors with line/column (grammar), byte position (regex) or JSON
// pointer (schema); nesting past max_nesting (grammar parentheses, regex groups) or 128 (schemas); left-
// recursive grammars naming the rule; "too large" naming the CompileLimits field and the value; unsatisfiable
// constraints (no finite output matches: enum [], anyOf [], minItems > maxItems, a grammar whose root never
// terminates); and constraints too ambiguous to track exactly ("<kind>: too ambiguous to track exactly:
// after the output prefix \"…\" more than 512 parses are alive (max_stacks)") — found by the compile-time
// probe (grammar.h). A compile stopped by its CompileControl is DEADLINE_EXCEEDED "<kind>: compile stopped
// after its time budget" or CANCELLED "<kind>: compile cancelled".
//
// Bounds (CompileLimits, grammar.h, with their defaults): text 1 MiB; 20,000 rules and 500,000 elements,
// checked while building; repetition bounds 65,536 (counted, not unrolled); nesting 256 in the text; 512
// parses alive at once and 4,096 deep; 20,000 probe states. No input recurses on the C++ stack: every
// constraint compiles and runs on a 256 KiB thread stack. Compile time is linear in the text plus the probe
// (milliseconds for ordinary schemas).
//
// Run time: a constraint the probe accepted can still meet a recogniser limit deeper than the probe looked
// (or nesting past max_stack_depth). The matcher then never silently drops a parse: Matcher::health()
// (token_mask.h) reports INVALID_ARGUMENT "constraint too ambiguous to track exactly after N output bytes:
// …", or FAILED_PRECONDITION when no token of the vocabulary can continue an incomplete output, and the
// engine ends the request with that status instead of a silent stop.
//
// Caching: masks depend only on (grammar, vocabulary, recogniser state). Each CompiledConstraint keeps one
// MaskCache per vocabulary (LRU, CompileLimits::mask_cache_entries masks), shared by all its matchers, so
// a state seen before costs one hash lookup instead of a trie walk (token_mask.h has the costs).
// Compiling is not cached here: a caller that sees the same spec often may keep the CompiledConstraint
// (memory_bytes() says what it holds).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/constrain/grammar.h"
#include "core/constrain/token_mask.h"

namespace frost::constrain {

struct ConstraintSpec {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kGrammar };
  Kind kind = Kind::kNone;
  std::string text;
};

const char* kind_name(ConstraintSpec::Kind kind);

// Immutable after compile except for its mask caches (internally locked); share it across threads and
// requests as std::shared_ptr<const CompiledConstraint>.
class CompiledConstraint {
 public:
  CompiledConstraint(ConstraintSpec::Kind kind, std::shared_ptr<const Grammar> grammar, size_t cache_entries)
      : kind_(kind), grammar_(std::move(grammar)), cache_entries_(cache_entries) {}

  ConstraintSpec::Kind kind() const { return kind_; }
  const Grammar& grammar() const { return *grammar_; }
  std::shared_ptr<const Grammar> grammar_ptr() const { return grammar_; }
  // Bytes held by the compiled grammar (Grammar::memory_bytes: elements, byte sets, class DFAs, rule
  // tables, names) plus this object — what a cache of compiled constraints should count. The mask caches
  // are not included: they are bounded by mask_cache_entries per vocabulary.
  size_t memory_bytes() const { return sizeof(*this) + grammar_->memory_bytes(); }

  // A fresh matcher at the start of the output, sharing this constraint's mask cache for `vocab`.
  std::unique_ptr<Matcher> matcher(std::shared_ptr<const TokenVocab> vocab) const;
  // The mask cache for `vocab` (created on first use; dropped when the vocabulary is gone).
  std::shared_ptr<MaskCache> mask_cache(const std::shared_ptr<const TokenVocab>& vocab) const;
  // Bytes the masks cached for this constraint hold now, over every vocabulary (grows as matchers run;
  // bounded by CompileLimits::mask_cache_entries per vocabulary).
  size_t cached_mask_bytes() const;

 private:
  const ConstraintSpec::Kind kind_;
  const std::shared_ptr<const Grammar> grammar_;
  const size_t cache_entries_;
  mutable absl::Mutex mu_;
  // Keyed by vocabulary identity; the weak_ptr tells a live vocabulary from a new one at a reused address.
  mutable std::vector<std::pair<std::weak_ptr<const TokenVocab>, std::shared_ptr<MaskCache>>> caches_
      ABSL_GUARDED_BY(mu_);
};

// Compiles `spec` under `limits`, stopping early as `control` asks (CompileControl, grammar.h: a deadline
// and a cancellation flag, checked in every loop of parsing, lowering, build() and the probe).
absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compile_constraint(const ConstraintSpec& spec,
                                                                             const CompileLimits& limits = {},
                                                                             const CompileControl& control = {});

}  // namespace frost::constrain
