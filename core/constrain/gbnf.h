#pragma once
// Parser of llama.cpp's GBNF grammar text into the grammar IR (core/constrain/grammar.h).
//
// Dialect (llama.cpp grammars/README.md, with two relaxations noted):
//   root ::= "{" ws pair ( "," ws pair )* "}"      # one rule per definition; `root` is the start rule
//   name         rule names are [a-zA-Z0-9_-]+; a reference may come before the definition
//   "text"       literal bytes; escapes \n \r \t \\ \" \' \[ \] \- \/ \xHH \uHHHH \UHHHHHHHH
//   [a-z_]       one character out of a class of code points (ranges, escapes as above); [^...] negates
//   .            any one character (any code point, UTF-8 encoded)
//   ( ... )      grouping; `|` separates alternatives
//   x* x+ x?     repetition; x{m} x{m,} x{m,n} bounded repetition (bounds <= CompileLimits::max_repeat)
//   # ...        comment to the end of the line
// Relaxations: a rule may span lines anywhere (a definition ends where the next `name ::=` begins, not at a
// newline), and a rule defined twice is an error instead of the later one silently winning.
// Errors are INVALID_ARGUMENT "grammar: <what> at line L, column C" (columns count bytes from 1);
// an undefined rule names the rule and its first reference; no `root` says so. Parentheses nested deeper
// than CompileLimits::max_nesting: "grammar: parentheses nest deeper than 256 (max_nesting) at line L,
// column C" (open groups live on an explicit stack: no text can exhaust the thread's stack). x{m,n} with
// n > 1 compiles to one counter element (grammar.h kRepeat), not n copies.
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/constrain/grammar.h"

namespace frost::constrain {

absl::StatusOr<std::shared_ptr<const Grammar>> parse_gbnf(absl::string_view text, const CompileLimits& limits,
                                                          const CompileControl& control = {});

}  // namespace frost::constrain
