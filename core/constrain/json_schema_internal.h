#pragma once
// The JSON Schema walk behind compile_json_schema() (json_schema.h), shared by its two source files:
// json_schema.cc (the walk, references, branches, scalars, the entry points) and json_schema_containers.cc
// (objects and arrays). Internal to core/constrain.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/base/attributes.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/constrain/grammar.h"
#include "core/constrain/json_schema.h"
#include "core/constrain/regex.h"
#include "core/constrain/schema_doc.h"

namespace frost::constrain::schema_internal {

using schema_doc::Json;
using schema_doc::kMaxSchemaDepth;
using schema_doc::SchemaView;

inline constexpr int64_t kMaxEnumerated = 1000;  // integer ranges up to this many values are enforced exactly
inline constexpr size_t kMaxInlineSeq = 16;      // a memoised subschema longer than this becomes one rule

inline const absl::flat_hash_set<absl::string_view>& refused_keywords() {
  static const auto* set = new absl::flat_hash_set<absl::string_view>{
      "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired",
      "dependentSchemas", "dependencies", "minProperties", "maxProperties", "contains", "minContains",
      "maxContains", "unevaluatedProperties", "unevaluatedItems", "multipleOf", "$dynamicRef",
      "$recursiveRef"};
  return *set;
}


inline std::string pointer_token(absl::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

inline std::string child(const std::string& ptr, absl::string_view key) { return absl::StrCat(ptr, "/", pointer_token(key)); }

class SchemaCompiler {
 public:
  // `kind` prefixes the builder's and build()'s messages ("json_schema", or "json_object" for any object).
  SchemaCompiler(const CompileLimits& limits, const CompileControl& control, const char* kind)
      : b_(limits, control), kind_(kind) {}

  absl::StatusOr<std::shared_ptr<const Grammar>> compile(const Json* doc) {
    doc_ = doc;
    const uint32_t root = b_.add_rule("root");
    if (doc == nullptr) {
      b_.add_alternative(root, {GrammarBuilder::ref(any_object())});
      if (!b_.tick().ok()) return prefixed(b_.status());
    } else {
      auto seq = visit(*doc, "", 0);
      // Builder statuses (size limits, the CompileControl) carry no prefix; the walk's own errors do.
      if (!b_.status().ok()) return prefixed(b_.status());
      if (!seq.ok()) return seq.status();
      b_.add_alternative(root, std::move(*seq));
    }
    auto g = b_.build(root);
    if (!g.ok()) {
      std::string msg = absl::StrCat(kind_, ": ", g.status().message());
      if (!first_empty_.empty() && absl::StartsWith(g.status().message(), "unsatisfiable")) {
        absl::StrAppend(&msg, " (first empty construct: ", first_empty_, ")");
      }
      return absl::Status(g.status().code(), msg);
    }
    return g;
  }

 private:
  absl::Status prefixed(const absl::Status& st) const {
    return absl::Status(st.code(), absl::StrCat(kind_, ": ", st.message()));
  }
  absl::Status err(absl::string_view what, const std::string& ptr) const {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", what, " at ", ptr.empty() ? "/" : ptr));
  }
  // A sequence that matches nothing: the productive-rule analysis prunes it, and refuses the schema
  // when nothing is left.
  Seq nothing(absl::string_view what, const std::string& ptr) {
    if (first_empty_.empty()) first_empty_ = absl::StrCat(what, " at ", ptr.empty() ? "/" : ptr);
    return {GrammarBuilder::bytes(ByteSet())};
  }
  static Seq lit(absl::string_view s) {
    Seq seq;
    GrammarBuilder::append_literal(seq, s);
    return seq;
  }
  static Seq cat(Seq a, const Seq& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  static Elem ref(uint32_t r) { return GrammarBuilder::ref(r); }

  // ---- shared rules, created on first use ----
  uint32_t ws() {
    if (ws_) return *ws_;
    ws_ = b_.add_rule("ws");
    const uint32_t indent = b_.repeat_internal({GrammarBuilder::byte(' ')}, 0, 16, "indent");
    b_.add_alternative(*ws_, {});
    b_.add_alternative(*ws_, lit(" "));
    b_.add_alternative(*ws_, {GrammarBuilder::byte('\n'), ref(indent)});
    return *ws_;
  }
  // char ::= [^"\\\x00-\x1F] | "\\" escape, with the escapes behind one backslash (so a string position
  // is two live parses, not four).
  uint32_t string_char() {
    if (char_) return *char_;
    char_ = b_.add_rule("char");
    b_.add_alternative(*char_, {b_.codepoints(complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}))});
    const uint32_t escape = b_.add_rule("char-escape");
    b_.add_alternative(*char_, {GrammarBuilder::byte('\\'), ref(escape)});
    ByteSet esc;
    for (char c : absl::string_view("\"\\/bfnrt")) esc.set(static_cast<uint8_t>(c));
    b_.add_alternative(escape, {GrammarBuilder::bytes(esc)});
    // \uXXXX except the surrogates D800-DFFF: strict parsers reject an unpaired one, and a pair would
    // need two escapes to agree. Characters past U+FFFF are written raw (UTF-8) instead.
    const Elem hex = b_.codepoints({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    const uint32_t unicode = b_.add_rule("char-unicode");
    b_.add_alternative(unicode, {b_.codepoints({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}}), hex, hex, hex});
    b_.add_alternative(unicode, {b_.codepoints({{'D', 'D'}, {'d', 'd'}}), b_.codepoints({{'0', '7'}}), hex, hex});
    b_.add_alternative(escape, {GrammarBuilder::byte('u'), ref(unicode)});
    return *char_;
  }
  uint32_t any_string() {
    if (string_) return *string_;
    string_ = b_.add_rule("string");
    const uint32_t body = b_.repeat_internal({ref(string_char())}, 0, -1, "string-chars");
    b_.add_alternative(*string_, {GrammarBuilder::byte('"'), ref(body), GrammarBuilder::byte('"')});
    return *string_;
  }
  // "0" | [1-9][0-9]{0,15}, optionally without the zero.
  Seq digits(bool allow_zero) {
    const uint32_t more = b_.repeat_internal({b_.codepoints({{'0', '9'}})}, 0, 15, "digits");
    Seq nonzero = {b_.codepoints({{'1', '9'}}), ref(more)};
    if (!allow_zero) return nonzero;
    return {ref(b_.group({lit("0"), nonzero}, "int-digits"))};
  }
  // A number without its sign.
  uint32_t number_body() {
    if (number_body_) return *number_body_;
    number_body_ = b_.add_rule("number-body");
    const Elem digit = b_.codepoints({{'0', '9'}});
    const uint32_t frac_digits = b_.repeat_internal({digit}, 1, 16, "frac-digits");
    const uint32_t frac = b_.repeat_internal({GrammarBuilder::byte('.'), ref(frac_digits)}, 0, 1, "frac");
    const uint32_t exp_digits = b_.repeat_internal({digit}, 1, 2, "exp-digits");  // |value| < 1e116: a double
    const uint32_t sign = b_.group({{}, lit("-"), lit("+")}, "exp-sign");
    const uint32_t exp = b_.repeat_internal({b_.codepoints({{'E', 'E'}, {'e', 'e'}}), ref(sign), ref(exp_digits)}, 0, 1, "exp");
    b_.add_alternative(*number_body_, cat(digits(true), {ref(frac), ref(exp)}));
    return *number_body_;
  }
  uint32_t any_number() {
    if (number_) return *number_;
    number_ = b_.group({{ref(number_body())}, {GrammarBuilder::byte('-'), ref(number_body())}}, "number");
    return *number_;
  }
  uint32_t any_value() {
    if (value_) return *value_;
    value_ = b_.add_rule("value");
    b_.add_alternative(*value_, {ref(any_object())});
    b_.add_alternative(*value_, {ref(any_array())});
    b_.add_alternative(*value_, {ref(any_string())});
    b_.add_alternative(*value_, {ref(any_number())});
    for (const char* word : {"true", "false", "null"}) b_.add_alternative(*value_, lit(word));
    return *value_;
  }
  // open ws ( item ws ( "," ws item ws )* )? close
  uint32_t list_of(char open, const Seq& item, char close, absl::string_view name) {
    const uint32_t rule = b_.add_rule(name);
    const uint32_t tail = b_.repeat_internal(cat(cat({GrammarBuilder::byte(','), ref(ws())}, item), {ref(ws())}), 0, -1,
                                     absl::StrCat(name, "-tail"));
    const uint32_t body = b_.repeat_internal(cat(item, {ref(ws()), ref(tail)}), 0, 1, absl::StrCat(name, "-body"));
    b_.add_alternative(rule, {GrammarBuilder::byte(open), ref(ws()), ref(body), GrammarBuilder::byte(close)});
    return rule;
  }
  Seq any_member() { return {ref(any_string()), GrammarBuilder::byte(':'), ref(ws()), ref(any_value())}; }
  // The rule is recorded before its body is built: the body reaches it again (a value may be an object),
  // and must find it rather than build a second copy (which would double the parses at every nesting level).
  uint32_t any_object() {
    if (object_) return *object_;
    object_ = b_.add_rule("object");
    const uint32_t list = list_of('{', any_member(), '}', "object-members");
    b_.add_alternative(*object_, {ref(list)});
    return *object_;
  }
  uint32_t any_array() {
    if (array_) return *array_;
    array_ = b_.add_rule("array");
    const uint32_t list = list_of('[', {ref(any_value())}, ']', "array-items");
    b_.add_alternative(*array_, {ref(list)});
    return *array_;
  }

  // ---- schema walk ----
  // The walk recurses once per nesting level of the schema (at most kMaxSchemaDepth = 128). The functions
  // on that path (visit, visit_view, visit_type(s), visit_object, visit_array, visit_branches, visit_ref)
  // keep only what must survive the recursive call in their frames: the deciding and the assembling are
  // out-of-line helpers, and per-node state lives on the heap. A level then costs well under 1 KiB of
  // stack, so the deepest schema fits a 256 KiB thread stack (tests/unit/constrain/bounds_test.cc).
  struct Route;
  struct ObjectPlan;
  struct ArrayPlan;
  struct BranchPlan;
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit(const Json& s, const std::string& ptr, int depth);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_view(const SchemaView& s, const std::string& ptr, int depth);
  ABSL_ATTRIBUTE_NOINLINE std::unique_ptr<Route> route(const SchemaView& s, const std::string& ptr, int depth);
  ABSL_ATTRIBUTE_NOINLINE Seq remember(const Json* s, Seq seq);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_ref(const Route& r, int depth);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<const Json*> resolve_ref(const Route& r);  // nullptr: known already
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_branches(const SchemaView& s, const char* key,
                                                             const std::string& ptr, int depth);
  ABSL_ATTRIBUTE_NOINLINE std::unique_ptr<BranchPlan> plan_branches(const SchemaView& s, const char* key,
                                                                    const std::string& ptr);
  ABSL_ATTRIBUTE_NOINLINE std::optional<std::vector<std::string>> literal_branches(const SchemaView& s,
                                                                                   const std::string& key,
                                                                                   const Json& branches,
                                                                                   bool has_siblings);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_enum(const Json& values, const std::string& ptr);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_types(const Json& types, const SchemaView& s,
                                                          const std::string& ptr, int depth);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_type(absl::string_view type, const SchemaView& s,
                                                         const std::string& ptr, const std::string& type_ptr,
                                                         int depth);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_scalar(absl::string_view type, const SchemaView& s,
                                                           const std::string& ptr, const std::string& type_ptr);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_string(const SchemaView& s, const std::string& ptr);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_integer(const SchemaView& s, const std::string& ptr);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_object(const SchemaView& s, const std::string& ptr, int depth);
  ABSL_ATTRIBUTE_NOINLINE absl::Status plan_object(const SchemaView& s, const std::string& ptr, ObjectPlan& plan);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> finish_object(ObjectPlan& plan);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> visit_array(const SchemaView& s, const std::string& ptr, int depth);
  ABSL_ATTRIBUTE_NOINLINE absl::Status plan_array(const SchemaView& s, const std::string& ptr, ArrayPlan& plan);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<Seq> finish_array(const SchemaView& s, const std::string& ptr, ArrayPlan& plan);
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<std::optional<int64_t>> count(const SchemaView& s, absl::string_view key,
                                                                      const std::string& ptr);

  GrammarBuilder b_;
  const char* kind_;
  const Json* doc_ = nullptr;
  std::optional<uint32_t> ws_, char_, string_, number_body_, number_, value_, object_, array_;
  absl::flat_hash_map<std::string, uint32_t> ref_rules_;
  // Subschemas compiled once: a schema reached again (a type list, branches sharing inherited
  // properties) reuses its sequence instead of compiling — and re-walking — it again.
  absl::flat_hash_map<const Json*, Seq> memo_;
  std::string first_empty_;
};

}  // namespace frost::constrain::schema_internal
