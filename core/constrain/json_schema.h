#pragma once
// JSON Schema → the grammar IR (core/constrain/grammar.h), in the spirit of llama.cpp's
// json-schema-to-grammar and outlines. The grammar generates JSON text; which documents it admits:
//
// Whitespace: `ws ::= ( " " | "\n" " "{0,16} )?` — at most one space, or one newline plus up to 16 spaces
//   of indentation — and only after `{` `[` `:` `,` and after a member / item (before `,` `}` `]`). No
//   whitespace before the first or after the last byte. Each ws is bounded and must be followed by
//   structure, so a model can never loop on whitespace. Compact JSON (`{"a":1,"b":[1,2]}`) and the
//   common styles `{"a": 1, "b": 2}` / indented pretty-printing (up to 16 spaces) are all admitted.
// Numbers: `-? (0 | [1-9][0-9]{0,15}) (. [0-9]{1,16})? ([eE] [+-]? [0-9]{1,2})?` (integers: no fraction or
//   exponent) — bounded so a model cannot loop on digits, and every number fits a double.
// Strings: any character but `"`, `\` and U+0000..U+001F, or an escape (\" \\ \/ \b \f \n \r \t \uXXXX, the
//   last never a surrogate D800-DFFF: characters past U+FFFF are written as raw UTF-8).
//
// Keywords:
//   type (string, number, integer, boolean, null, object, array, or an array of these); when `type` is
//     absent it is inferred from the keywords present (properties/required/additionalProperties → object;
//     items/prefixItems/minItems/maxItems → array; minLength/maxLength/pattern/format → string), else any
//     JSON value.
//   properties are emitted in the schema's order; `required` ones must appear, the others may be omitted
//     (each at its place in that order). A required name missing from `properties` is added, any value.
//     Every optional member that may come next is one live parse, so an object with more optional
//     members than max_stacks (512) between two required ones is refused as too ambiguous.
//   additionalProperties: false by default when `properties` is given (the model writes only the listed
//     members) and true when it is not (`{"type":"object"}` = any object). true or a schema: after the
//     listed members come any number of extra members with any key (the grammar cannot exclude the listed
//     names there, so a duplicate key is possible) and a value matching the schema.
//   items, prefixItems (and draft-4 `items: [...]` with additionalItems), minItems, maxItems.
//   enum / const (the values' compact JSON text); anyOf and oneOf as alternatives (oneOf's exclusivity is
//     not enforced); sibling keywords are merged into each branch; allOf with exactly one schema.
//   $ref to any local JSON pointer ("#", "#/$defs/x", "#/definitions/x", ...); recursion is allowed.
//     Keywords beside $ref are ignored (draft-7 semantics).
//   string minLength/maxLength (in characters; an escape counts as one); pattern (core/constrain/regex.h,
//     full-match semantics; when given, minLength/maxLength are ignored); format date, time, date-time
//     and uuid (simple patterns: no calendar checks); other formats are ignored.
//   integer minimum/maximum/exclusiveMinimum/exclusiveMaximum: a range of at most 1000 values is
//     enforced exactly; otherwise only the sign (minimum >= 0: no minus sign; >= 1: no zero; maximum
//     <= -1: minus sign). number: minimum >= 0 forbids the minus sign; other bounds are ignored.
//   Annotations (title, description, examples, default, $schema, $id, $comment, deprecated, readOnly,
//     writeOnly, $defs, definitions) and unknown keywords are ignored.
//   Refused (they change the language and are not expressible here): not, if/then/else,
//     patternProperties, propertyNames, dependentRequired, dependentSchemas, dependencies, minProperties,
//     maxProperties, contains, minContains, maxContains, unevaluatedProperties, unevaluatedItems,
//     multipleOf, uniqueItems: true, $dynamicRef, $recursiveRef, remote $ref.
// Bounds (all refusals are INVALID_ARGUMENT unless noted):
//   - the text: CompileLimits::max_text_bytes; JSON nested deeper than 256 levels ("json_schema: JSON nests
//     deeper than 256 levels"), checked while parsing (the parser is iterative and appends object members
//     without nlohmann's linear duplicate search, so neither depth nor width costs more than linear time);
//   - subschemas nested (inline or through a chain of $ref) deeper than 128: "json_schema: schema nests
//     deeper than 128 at /properties/a/…";
//   - minLength/maxLength/minItems/maxItems above CompileLimits::max_repeat (65536): they compile to one
//     counter element (grammar.h kRepeat), so `maxLength: 4096` costs one element, not 4096 rules;
//   - rules / elements past max_rules / max_elements, refused while the walk builds them;
//   - a grammar the compile-time probe finds too ambiguous to track (more than max_stacks parses alive, e.g.
//     an anyOf of 600 non-literal branches): "json_schema: too ambiguous to track exactly: after the output
//     prefix \"…\" more than 512 parses are alive (max_stacks)";
//   - the CompileControl: DEADLINE_EXCEEDED / CANCELLED "json_schema: compile stopped after its time
//     budget" / "json_schema: compile cancelled".
// Cost: the walk is linear in the schema. Branches see their siblings through a lookup chain (no copies);
// a subschema reached twice (type lists, branches inheriting the same properties) is compiled once;
// enum / const values — and anyOf / oneOf whose branches are all enum / const — compile to one trie of
// their compact JSON texts, so 600 values are one parse per byte, not 600.
// Errors: INVALID_ARGUMENT "json_schema: <what> at <JSON pointer>", e.g.
//   "json_schema: unknown type 'strng' at /properties/name/type"; a schema no document satisfies
//   (enum [], anyOf [], minItems 3 with maxItems 1, ...) is refused as unsatisfiable, naming the first
//   empty construct found.
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/constrain/grammar.h"

namespace frost::constrain {

// A grammar for the JSON documents that `schema_text` (a JSON Schema document) admits.
absl::StatusOr<std::shared_ptr<const Grammar>> compile_json_schema(absl::string_view schema_text,
                                                                    const CompileLimits& limits,
                                                                    const CompileControl& control = {});

// A grammar for any JSON object (the OpenAI-style `json_object` response format), same whitespace rule.
absl::StatusOr<std::shared_ptr<const Grammar>> compile_json_object(const CompileLimits& limits,
                                                                    const CompileControl& control = {});

}  // namespace frost::constrain
