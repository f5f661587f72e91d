#pragma once
// Regular expressions (the subset structured-output APIs use) → the grammar IR (core/constrain/grammar.h).
//
// Supported: literals (UTF-8), escapes \d \w \s \D \W \S (\s is ECMAScript's whitespace set), \. \\ and
// any other escaped punctuation, \n \t \r \f \v \0 \xHH \uHHHH; classes [...] with ranges, escapes and ^
// negation ([] matches nothing, as in ECMAScript); `.` (any character but \n); groups ( ), (?: ) and
// named groups (?<name> ); alternation |; quantifiers * + ? {n} {n,} {n,m} ({,m} = {0,m}); lazy
// quantifiers (x*?) are treated as greedy — a recogniser accepts the same language either way. A `{`
// that does not start a valid quantifier is a literal, as in ECMAScript. `^` at the start and `$` at the
// end are accepted and ignored: the whole output must match (full-match semantics, also for JSON Schema
// `pattern`). Everything else — backreferences, lookaround, word boundaries, inline flags, possessive
// quantifiers, anchors elsewhere — is refused: INVALID_ARGUMENT "regex: unsupported <x> at position N"
// (N = byte offset in the pattern). Syntax errors: "regex: <what> at position N". Groups nested deeper than
// CompileLimits::max_nesting: "regex: groups nest deeper than 256 (max_nesting) at position N" (the parser
// keeps open groups on an explicit stack, so no pattern can exhaust the thread's stack). Counted
// quantifiers {n,m} with m > 1 compile to one counter element (grammar.h kRepeat), not m copies, so a bound
// costs nothing until CompileLimits::max_repeat.
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/constrain/grammar.h"

namespace frost::constrain {

struct RegexOptions {
  // Lower as the content of a JSON string literal: characters that JSON must escape (", \ and U+0000..
  // U+001F) match their escape sequence (\" \\ \n \t \r \b \f or \u00XX), everything else matches raw.
  bool json_string = false;
};

// Adds rules matching exactly `pattern` to `builder`; returns the rule that matches the whole pattern.
// Errors: the pattern's own ("regex: … at position N"), or builder.status() when a size limit was passed
// or the builder's CompileControl stopped the compile (that status is returned as is, without prefix).
absl::StatusOr<uint32_t> add_regex(GrammarBuilder& builder, absl::string_view pattern, const RegexOptions& options);

// A grammar whose language is `pattern` (full match).
absl::StatusOr<std::shared_ptr<const Grammar>> compile_regex(absl::string_view pattern, const CompileLimits& limits,
                                                             const CompileControl& control = {});

}  // namespace frost::constrain
