#include "core/constrain/json_schema.h"

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
#include "core/constrain/regex.h"
#include "core/constrain/schema_doc.h"

namespace frost::constrain {
namespace {

using schema_doc::Json;
using schema_doc::kMaxSchemaDepth;
using schema_doc::SchemaView;

constexpr int64_t kMaxEnumerated = 1000;  // integer ranges up to this many values are enforced exactly
constexpr size_t kMaxInlineSeq = 16;      // a memoised subschema longer than this becomes one rule

const absl::flat_hash_set<absl::string_view>& refused_keywords() {
  static const auto* set = new absl::flat_hash_set<absl::string_view>{
      "not", "if", "then", "else", "patternProperties", "propertyNames", "dependentRequired",
      "dependentSchemas", "dependencies", "minProperties", "maxProperties", "contains", "minContains",
      "maxContains", "unevaluatedProperties", "unevaluatedItems", "multipleOf", "$dynamicRef",
      "$recursiveRef"};
  return *set;
}


std::string pointer_token(absl::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string child(const std::string& ptr, absl::string_view key) { return absl::StrCat(ptr, "/", pointer_token(key)); }

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

bool has_refused_keyword(const Json& s) {
  for (const auto& [key, value] : s.items()) {
    if (refused_keywords().contains(key) || (key == "uniqueItems" && value == true)) return true;
  }
  return false;
}

// What visit_view does with a schema, decided without recursing.
struct SchemaCompiler::Route {
  enum class Kind { kDone, kRef, kBranches, kType, kTypes } kind = Kind::kDone;
  absl::StatusOr<Seq> done;   // kDone: the result, or the error
  const Json* arg = nullptr;  // kTypes: the type list
  const char* key = nullptr;  // kBranches: anyOf / oneOf / allOf
  absl::string_view type;     // kType: the type, given or inferred
  std::string target, ptr;    // kRef: the target and the pointer of the $ref keyword; kType: the type's
};

absl::StatusOr<Seq> SchemaCompiler::visit(const Json& s, const std::string& ptr, int depth) {
  if (auto it = memo_.find(&s); it != memo_.end()) return it->second;
  absl::StatusOr<Seq> seq = visit_view(SchemaView(s), ptr, depth);
  if (!seq.ok()) return seq;
  return remember(&s, *std::move(seq));
}

Seq SchemaCompiler::remember(const Json* s, Seq seq) {
  if (seq.size() > kMaxInlineSeq) seq = {ref(b_.group({std::move(seq)}, "schema"))};
  memo_.emplace(s, seq);
  return seq;
}

absl::StatusOr<Seq> SchemaCompiler::visit_view(const SchemaView& s, const std::string& ptr, int depth) {
  const std::unique_ptr<Route> r = route(s, ptr, depth);
  switch (r->kind) {
    case Route::Kind::kDone: return std::move(r->done);
    case Route::Kind::kRef: return visit_ref(*r, depth);
    case Route::Kind::kBranches: return visit_branches(s, r->key, ptr, depth);
    case Route::Kind::kType: return visit_type(r->type, s, ptr, r->ptr, depth);
    case Route::Kind::kTypes: return visit_types(*r->arg, s, ptr, depth);
  }
  return absl::InternalError("json_schema: unreachable");
}

std::unique_ptr<SchemaCompiler::Route> SchemaCompiler::route(const SchemaView& s, const std::string& ptr, int depth) {
  auto r = std::make_unique<Route>();
  auto done = [&](absl::StatusOr<Seq> result) {
    r->kind = Route::Kind::kDone;
    r->done = std::move(result);
    return std::move(r);
  };
  if (depth > kMaxSchemaDepth) return done(err(absl::StrCat("schema nests deeper than ", kMaxSchemaDepth), ptr));
  if (!b_.tick().ok()) return done(b_.status());
  const Json& own = s.own();
  if (own.is_boolean()) return done(own.get<bool>() ? Seq{ref(any_value())} : nothing("schema false", ptr));
  if (!own.is_object()) return done(err("schema must be an object or a boolean", ptr));
  // Inherited keywords were checked where they are written.
  for (const auto& [key, value] : own.items()) {
    if (refused_keywords().contains(key)) {
      return done(err(absl::StrCat("unsupported keyword '", key, "'"), child(ptr, key)));
    }
    if (key == "uniqueItems" && value == true) return done(err("unsupported keyword 'uniqueItems'", child(ptr, key)));
  }
  if (const Json* target = s.find("$ref")) {
    if (!target->is_string()) return done(err("$ref must be a string", child(ptr, "$ref")));
    r->kind = Route::Kind::kRef;
    r->target = target->get<std::string>();
    r->ptr = child(ptr, "$ref");
    return r;
  }
  if (s.contains("anyOf") && s.contains("oneOf")) return done(err("anyOf together with oneOf is unsupported", ptr));
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (s.contains(key)) {
      r->kind = Route::Kind::kBranches;
      r->key = key;
      return r;
    }
  }
  if (const Json* c = s.find("const")) return done(lit(c->dump()));
  if (const Json* e = s.find("enum")) return done(visit_enum(*e, ptr));
  if (const Json* type = s.find("type")) {
    if (type->is_string()) {
      r->kind = Route::Kind::kType;
      r->type = type->get_ref<const std::string&>();
      r->ptr = child(ptr, "type");
    } else {
      r->kind = Route::Kind::kTypes;
      r->arg = type;
    }
    return r;
  }
  // No type: infer it from the keywords that only make sense for one type, else any value.
  auto has = [&](std::initializer_list<const char*> keys) {
    return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
  };
  r->kind = Route::Kind::kType;
  r->ptr = ptr;
  if (has({"properties", "required", "additionalProperties"})) {
    r->type = "object";
  } else if (has({"items", "prefixItems", "minItems", "maxItems"})) {
    r->type = "array";
  } else if (has({"minLength", "maxLength", "pattern", "format"})) {
    r->type = "string";
  } else {
    return done(Seq{ref(any_value())});
  }
  return r;
}

absl::StatusOr<Seq> SchemaCompiler::visit_enum(const Json& values, const std::string& ptr) {
  if (!values.is_array()) return err("enum must be an array", child(ptr, "enum"));
  if (values.empty()) return nothing("enum []", child(ptr, "enum"));
  // One trie over the values' compact texts: duplicates merge, and one parse survives each byte however
  // many values there are.
  std::vector<std::string> words;
  words.reserve(values.size());
  for (const Json& v : values) {
    if (!b_.tick().ok()) return b_.status();
    words.push_back(v.dump());
  }
  return b_.literal_trie(std::move(words), "enum");
}

absl::StatusOr<Seq> SchemaCompiler::visit_types(const Json& types, const SchemaView& s, const std::string& ptr,
                                                int depth) {
  const std::string type_ptr = child(ptr, "type");
  if (!types.is_array()) return err("type must be a string or an array of strings", type_ptr);
  if (types.empty()) return nothing("type []", type_ptr);
  auto alts = std::make_unique<std::vector<Seq>>();
  for (size_t i = 0; i < types.size(); ++i) {
    if (!types[i].is_string()) return err("type must be a string or an array of strings", type_ptr);
    auto alt = visit_type(types[i].get<std::string>(), s, ptr, child(type_ptr, std::to_string(i)), depth);
    if (!alt.ok()) return alt.status();
    alts->push_back(*std::move(alt));
  }
  return Seq{ref(b_.group(std::move(*alts), "types"))};
}

absl::StatusOr<Seq> SchemaCompiler::visit_ref(const Route& r, int depth) {
  absl::StatusOr<const Json*> node = resolve_ref(r);
  if (!node.ok()) return node.status();
  if (*node == nullptr) return Seq{ref(ref_rules_[r.target])};  // compiled (or being compiled) already
  // The rule exists before its body is compiled, so a recursive reference finds it.
  const uint32_t rule = b_.add_rule(absl::StrCat("ref", r.target.substr(1)));
  ref_rules_[r.target] = rule;
  auto body = visit(**node, r.target.substr(1), depth + 1);
  if (!body.ok()) return body.status();
  b_.add_alternative(rule, *std::move(body));
  return Seq{ref(rule)};
}

absl::StatusOr<const Json*> SchemaCompiler::resolve_ref(const Route& r) {
  const std::string& target = r.target;
  if (target.empty() || target[0] != '#') return err(absl::StrCat("unsupported remote $ref '", target, "'"), r.ptr);
  if (ref_rules_.contains(target)) return nullptr;
  try {
    return &doc_->at(Json::json_pointer(target.substr(1)));
  } catch (const Json::exception&) {
    return err(absl::StrCat("$ref '", target, "' does not resolve"), r.ptr);
  }
}

// The values of every branch when all are literal — const or enum and nothing else that shapes the value
// — so that they compile to one trie; nullopt otherwise (and for anything the general walk must report).
std::optional<std::vector<std::string>> SchemaCompiler::literal_branches(const SchemaView& s, const std::string& key,
                                                                         const Json& branches, bool has_siblings) {
  std::vector<std::string> words;
  for (const Json& branch : branches) {
    if (!branch.is_object() || has_refused_keyword(branch)) return std::nullopt;
    const SchemaView plain(branch), merged(branch, &s, key);
    const SchemaView& v = has_siblings ? merged : plain;
    for (const char* k : {"$ref", "anyOf", "oneOf", "allOf"}) {
      if (v.contains(k)) return std::nullopt;
    }
    if (const Json* c = v.find("const")) {
      words.push_back(c->dump());
    } else if (const Json* e = v.find("enum"); e != nullptr && e->is_array() && !e->empty()) {
      for (const Json& value : *e) {
        if (!b_.tick().ok()) return std::nullopt;
        words.push_back(value.dump());
      }
    } else {
      return std::nullopt;
    }
  }
  return words;
}

struct SchemaCompiler::BranchPlan {
  std::optional<absl::StatusOr<Seq>> done;  // decided without walking the branches
  const Json* branches = nullptr;
  std::string list_ptr;
  bool has_siblings = false;
  std::vector<Seq> alts;
};

std::unique_ptr<SchemaCompiler::BranchPlan> SchemaCompiler::plan_branches(const SchemaView& s, const char* key,
                                                                          const std::string& ptr) {
  auto plan = std::make_unique<BranchPlan>();
  const Json& branches = *s.find(key);
  plan->branches = &branches;
  plan->list_ptr = child(ptr, key);
  if (!branches.is_array()) {
    plan->done = err(absl::StrCat(key, " must be an array"), plan->list_ptr);
  } else if (absl::string_view(key) == "allOf" && branches.size() != 1) {
    plan->done = err(absl::StrCat("allOf with ", branches.size(), " schemas is unsupported (only one)"), plan->list_ptr);
  } else if (branches.empty()) {
    plan->done = nothing(absl::StrCat(key, " []"), plan->list_ptr);
  } else {
    // Siblings of anyOf/oneOf/allOf apply to every branch: each branch is walked as a view over its own
    // keywords and the siblings (the branch wins on conflicts) — nothing is copied.
    plan->has_siblings = s.has_keywords_besides(key);
    if (auto words = literal_branches(s, key, branches, plan->has_siblings)) {
      plan->done = b_.literal_trie(*std::move(words), key);
    } else if (!b_.status().ok()) {
      plan->done = b_.status();
    }
  }
  return plan;
}

absl::StatusOr<Seq> SchemaCompiler::visit_branches(const SchemaView& s, const char* key, const std::string& ptr,
                                                   int depth) {
  const std::unique_ptr<BranchPlan> plan = plan_branches(s, key, ptr);
  if (plan->done) return *std::move(plan->done);
  for (size_t i = 0; i < plan->branches->size(); ++i) {
    const Json& branch = (*plan->branches)[i];
    const std::string branch_ptr = child(plan->list_ptr, std::to_string(i));
    absl::StatusOr<Seq> alt = !plan->has_siblings || !branch.is_object()
                                  ? visit(branch, branch_ptr, depth + 1)
                                  : visit_view(SchemaView(branch, &s, key), branch_ptr, depth + 1);
    if (!alt.ok()) return alt.status();
    plan->alts.push_back(*std::move(alt));
  }
  if (plan->alts.size() == 1) return std::move(plan->alts[0]);
  return Seq{ref(b_.group(std::move(plan->alts), key))};
}

// `ptr` is the schema's pointer, `type_ptr` the pointer of the type name (for the unknown-type error).
absl::StatusOr<Seq> SchemaCompiler::visit_type(absl::string_view type, const SchemaView& s, const std::string& ptr,
                                               const std::string& type_ptr, int depth) {
  if (type == "object") return visit_object(s, ptr, depth);
  if (type == "array") return visit_array(s, ptr, depth);
  return visit_scalar(type, s, ptr, type_ptr);
}

absl::StatusOr<Seq> SchemaCompiler::visit_scalar(absl::string_view type, const SchemaView& s, const std::string& ptr,
                                                 const std::string& type_ptr) {
  if (type == "string") return visit_string(s, ptr);
  if (type == "integer") return visit_integer(s, ptr);
  if (type == "number") {
    for (const char* k : {"minimum", "exclusiveMinimum"}) {
      const Json* v = s.find(k);
      if (v != nullptr && v->is_number() && v->get<double>() >= 0) return Seq{ref(number_body())};
    }
    return Seq{ref(any_number())};
  }
  if (type == "boolean") return Seq{ref(b_.group({lit("true"), lit("false")}, "boolean"))};
  if (type == "null") return lit("null");
  return err(absl::StrCat("unknown type '", type, "'"), type_ptr);
}

absl::StatusOr<std::optional<int64_t>> SchemaCompiler::count(const SchemaView& s, absl::string_view key,
                                                            const std::string& ptr) {
  const Json* v = s.find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_number_unsigned()) return err(absl::StrCat(key, " must be a non-negative integer"), child(ptr, key));
  const uint64_t n = v->get<uint64_t>();
  if (n > static_cast<uint64_t>(b_.limits().max_repeat)) {
    return err(absl::StrCat(key, " ", n, " exceeds max_repeat ", b_.limits().max_repeat), child(ptr, key));
  }
  return std::optional<int64_t>(static_cast<int64_t>(n));
}

absl::StatusOr<Seq> SchemaCompiler::visit_string(const SchemaView& s, const std::string& ptr) {
  const Elem quote = GrammarBuilder::byte('"');
  std::string pattern;
  std::string pattern_ptr = child(ptr, "pattern");
  if (const Json* p = s.find("pattern")) {
    if (!p->is_string()) return err("pattern must be a string", pattern_ptr);
    pattern = p->get<std::string>();
  } else if (const Json* f = s.find("format"); f != nullptr && f->is_string()) {
    static const auto* formats = new absl::flat_hash_map<std::string, std::string>{
        {"date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"},
        {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
        {"date-time",
         "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
         "(\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
        {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"}};
    if (auto known = formats->find(f->get<std::string>()); known != formats->end()) pattern = known->second;
    pattern_ptr = child(ptr, "format");
  }
  if (!pattern.empty()) {
    auto rule = add_regex(b_, pattern, RegexOptions{/*json_string=*/true});
    if (!b_.status().ok()) return b_.status();
    if (!rule.ok()) return err(rule.status().message(), pattern_ptr);
    return Seq{quote, ref(*rule), quote};
  }
  auto min = count(s, "minLength", ptr);
  if (!min.ok()) return min.status();
  auto max = count(s, "maxLength", ptr);
  if (!max.ok()) return max.status();
  if (!min->has_value() && !max->has_value()) return Seq{ref(any_string())};
  const int64_t lo = min->value_or(0), hi = max->value_or(-1);
  if (hi >= 0 && hi < lo) return nothing(absl::StrCat("minLength ", lo, " > maxLength ", hi), ptr);
  // A counted repeat: maxLength 4096 is one element whose count lives in the parse, not 4096 rules.
  auto body = b_.repeat({ref(string_char())}, lo, hi, "string-chars");
  if (!body.ok()) return err(body.status().message(), ptr);
  return Seq{quote, *body, quote};
}

absl::StatusOr<Seq> SchemaCompiler::visit_integer(const SchemaView& s, const std::string& ptr) {
  // Bounds as integers; draft-4 boolean exclusiveMinimum/Maximum modify minimum/maximum.
  constexpr double kHuge = 9e15;
  std::optional<double> lo, hi;
  auto read = [&](const char* key) -> std::optional<double> {
    const Json* v = s.find(key);
    if (v == nullptr || !v->is_number()) return std::nullopt;
    return std::clamp(v->get<double>(), -kHuge, kHuge);
  };
  auto is_true = [&](const char* key) {
    const Json* v = s.find(key);
    return v != nullptr && *v == true;
  };
  const bool excl_min_bool = is_true("exclusiveMinimum");
  const bool excl_max_bool = is_true("exclusiveMaximum");
  if (auto v = read("minimum")) lo = excl_min_bool ? std::floor(*v) + 1 : std::ceil(*v);
  if (auto v = read("exclusiveMinimum")) lo = std::max(lo.value_or(-kHuge), std::floor(*v) + 1);
  if (auto v = read("maximum")) hi = excl_max_bool ? std::ceil(*v) - 1 : std::floor(*v);
  if (auto v = read("exclusiveMaximum")) hi = std::min(hi.value_or(kHuge), std::ceil(*v) - 1);
  if (lo && hi && *lo > *hi) return nothing("minimum > maximum", ptr);
  if (lo && hi && *hi - *lo < kMaxEnumerated) {
    // A trie of the decimal texts: one parse per byte however many values the range has.
    std::vector<std::string> words;
    for (auto v = static_cast<int64_t>(*lo); v <= static_cast<int64_t>(*hi); ++v) words.push_back(std::to_string(v));
    return b_.literal_trie(std::move(words), "int-range");
  }
  if (lo && *lo >= 1) return digits(false);
  if (lo && *lo >= 0) return digits(true);
  if (hi && *hi <= -1) return cat(lit("-"), digits(false));
  if (hi && *hi <= 0) return Seq{ref(b_.group({lit("0"), cat(lit("-"), digits(false))}, "nonpos"))};
  return Seq{ref(b_.group({digits(true), cat(lit("-"), digits(false))}, "integer"))};
}

struct SchemaCompiler::ObjectPlan {
  struct Sub {
    const Json* schema;
    std::string ptr;
  };
  std::vector<Sub> subs;                 // the property schemas, then additionalProperties when a schema
  std::vector<std::string> names;        // per property
  absl::flat_hash_set<std::string> required;
  const Json* req = nullptr;
  bool has_extra = false, extra_schema = false;
  std::vector<Seq> values;               // per sub, in order
};

absl::StatusOr<Seq> SchemaCompiler::visit_object(const SchemaView& s, const std::string& ptr, int depth) {
  auto plan = std::make_unique<ObjectPlan>();
  if (absl::Status st = plan_object(s, ptr, *plan); !st.ok()) return st;
  for (const ObjectPlan::Sub& sub : plan->subs) {
    auto value = visit(*sub.schema, sub.ptr, depth + 1);
    if (!value.ok()) return value.status();
    plan->values.push_back(*std::move(value));
  }
  return finish_object(*plan);
}

absl::Status SchemaCompiler::plan_object(const SchemaView& s, const std::string& ptr, ObjectPlan& plan) {
  plan.req = s.find("required");
  if (plan.req != nullptr) {
    if (!plan.req->is_array()) return err("required must be an array of strings", child(ptr, "required"));
    for (const Json& r : *plan.req) {
      if (!r.is_string()) return err("required must be an array of strings", child(ptr, "required"));
      plan.required.insert(r.get<std::string>());
    }
  }
  const Json* props = s.find("properties");
  if (props != nullptr) {
    if (!props->is_object()) return err("properties must be an object", child(ptr, "properties"));
    const std::string props_ptr = child(ptr, "properties");
    for (const auto& [name, sub] : props->items()) {
      plan.subs.push_back({&sub, child(props_ptr, name)});
      plan.names.push_back(name);
    }
  }
  // Extra members: additionalProperties absent means false when properties are listed, else true.
  const Json* add = s.find("additionalProperties");
  plan.has_extra = add == nullptr ? props == nullptr : (add->is_boolean() ? add->get<bool>() : true);
  if (plan.has_extra && add != nullptr && add->is_object()) {
    plan.extra_schema = true;
    plan.subs.push_back({add, child(ptr, "additionalProperties")});
  } else if (plan.has_extra && add != nullptr && !add->is_boolean()) {
    return err("additionalProperties must be a boolean or a schema", child(ptr, "additionalProperties"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Seq> SchemaCompiler::finish_object(ObjectPlan& plan) {
  struct Member {
    Seq kv;  // "name" ":" ws value
    bool required;
  };
  std::vector<Member> members;
  const Seq colon = {GrammarBuilder::byte(':'), ref(ws())};
  absl::flat_hash_set<std::string> listed;
  for (size_t i = 0; i < plan.names.size(); ++i) {
    members.push_back({cat(cat(lit(Json(plan.names[i]).dump()), colon), plan.values[i]), plan.required.contains(plan.names[i])});
    listed.insert(plan.names[i]);
  }
  if (plan.req != nullptr) {
    for (const Json& r : *plan.req) {
      const std::string name = r.get<std::string>();
      if (listed.insert(name).second) members.push_back({cat(cat(lit(Json(name).dump()), colon), {ref(any_value())}), true});
    }
  }
  std::optional<Seq> extra;
  if (plan.has_extra) {
    const Seq value = plan.extra_schema ? plan.values.back() : Seq{ref(any_value())};
    extra = cat(cat({ref(any_string())}, colon), value);
  }
  // pick[i]: the next member written is member j >= i (optional ones may be skipped, in order; past the
  // listed members come the extra ones); later[i]: after a member before i was written — end (when no
  // required member is left) or a comma, whitespace and pick[i]. The comma and the whitespace come before
  // the choice, so after them one parse per member that may come next is alive (N optional members: N
  // parses, not 3N).
  const size_t n = members.size();
  std::vector<uint32_t> pick(n + 1), later(n + 1);
  std::vector<bool> may_end(n + 1, true);  // no required member in i..n-1
  for (size_t i = n; i-- > 0;) may_end[i] = may_end[i + 1] && !members[i].required;
  pick[n] = b_.add_rule("members-extra");
  later[n] = b_.add_rule("members-rest");
  b_.add_alternative(later[n], {});
  if (extra) {
    const Seq sep = {GrammarBuilder::byte(','), ref(ws())};
    const uint32_t loop = b_.repeat_internal(cat(cat(sep, *extra), {ref(ws())}), 0, -1, "extra-members");
    b_.add_alternative(pick[n], cat(*extra, {ref(ws()), ref(loop)}));
    b_.add_alternative(later[n], {GrammarBuilder::byte(','), ref(ws()), ref(pick[n])});
  }
  for (size_t i = n; i-- > 0;) {
    if (!b_.tick().ok()) return b_.status();
    pick[i] = b_.add_rule("members");
    b_.add_alternative(pick[i], cat(members[i].kv, {ref(ws()), ref(later[i + 1])}));
    if (!members[i].required) b_.add_alternative(pick[i], {ref(pick[i + 1])});
    later[i] = b_.add_rule("members-rest");
    b_.add_alternative(later[i], {GrammarBuilder::byte(','), ref(ws()), ref(pick[i])});
    if (may_end[i]) b_.add_alternative(later[i], {});
  }
  Seq object = {GrammarBuilder::byte('{'), ref(ws())};
  if (may_end[0]) {
    object.push_back(ref(b_.group({{ref(pick[0])}, {}}, "members-first")));
  } else {
    object.push_back(ref(pick[0]));
  }
  object.push_back(GrammarBuilder::byte('}'));
  return object;
}

struct SchemaCompiler::ArrayPlan {
  struct Sub {
    const Json* schema;
    std::string ptr;
  };
  std::vector<Sub> subs;  // the prefix items, then the rest schema when there is one
  size_t n_prefix = 0;
  bool rest_schema = false, rest_allowed = true;
  std::vector<Seq> values;  // per sub, in order
};

absl::StatusOr<Seq> SchemaCompiler::visit_array(const SchemaView& s, const std::string& ptr, int depth) {
  auto plan = std::make_unique<ArrayPlan>();
  if (absl::Status st = plan_array(s, ptr, *plan); !st.ok()) return st;
  for (const ArrayPlan::Sub& sub : plan->subs) {
    auto item = visit(*sub.schema, sub.ptr, depth + 1);
    if (!item.ok()) return item.status();
    plan->values.push_back(*std::move(item));
  }
  return finish_array(s, ptr, *plan);
}

absl::Status SchemaCompiler::plan_array(const SchemaView& s, const std::string& ptr, ArrayPlan& plan) {
  const Json* prefix_list = nullptr;
  std::string prefix_ptr;
  const Json* rest = nullptr;  // schema of the items after the prefix; nullptr = any value
  std::string rest_ptr;
  const Json* items = s.find("items");
  if (const Json* p = s.find("prefixItems")) {
    prefix_list = p;
    prefix_ptr = child(ptr, "prefixItems");
    if (items != nullptr) rest = items, rest_ptr = child(ptr, "items");
  } else if (items != nullptr && items->is_array()) {
    prefix_list = items;  // draft 4: items as a list, additionalItems for the rest
    prefix_ptr = child(ptr, "items");
    if (const Json* a = s.find("additionalItems")) rest = a, rest_ptr = child(ptr, "additionalItems");
  } else if (items != nullptr) {
    rest = items;
    rest_ptr = child(ptr, "items");
  }
  if (prefix_list != nullptr) {
    if (!prefix_list->is_array()) return err("prefixItems must be an array", prefix_ptr);
    for (size_t i = 0; i < prefix_list->size(); ++i) {
      plan.subs.push_back({&(*prefix_list)[i], child(prefix_ptr, std::to_string(i))});
    }
  }
  plan.n_prefix = plan.subs.size();
  if (rest != nullptr && rest->is_boolean()) {
    plan.rest_allowed = rest->get<bool>();
  } else if (rest != nullptr) {
    plan.rest_schema = true;
    plan.subs.push_back({rest, rest_ptr});
  }
  return absl::OkStatus();
}

absl::StatusOr<Seq> SchemaCompiler::finish_array(const SchemaView& s, const std::string& ptr, ArrayPlan& plan) {
  const std::vector<Seq> prefix(plan.values.begin(), plan.values.begin() + static_cast<ptrdiff_t>(plan.n_prefix));
  const Seq rest_item = plan.rest_schema ? plan.values.back() : Seq{ref(any_value())};
  const bool rest_allowed = plan.rest_allowed;
  auto min_items = count(s, "minItems", ptr);
  if (!min_items.ok()) return min_items.status();
  auto max_items = count(s, "maxItems", ptr);
  if (!max_items.ok()) return max_items.status();
  const int64_t k = static_cast<int64_t>(prefix.size());
  const int64_t lo = min_items->value_or(0);
  int64_t hi = max_items->value_or(-1);
  if (!rest_allowed) hi = hi < 0 ? k : std::min(hi, k);
  if (hi >= 0 && lo > hi) {
    return nothing(absl::StrCat("minItems ", lo, " > maxItems ", hi, rest_allowed ? "" : " (no items beyond prefixItems)"), ptr);
  }
  const Seq open = {GrammarBuilder::byte('['), ref(ws())};
  if (hi == 0) return cat(open, lit("]"));
  auto item = [&](int64_t j) -> const Seq& { return j < k ? prefix[j] : rest_item; };
  // tail: what may follow once j items are written, built from the back. Past the prefix (index
  // first_rest on) the items are one counted repeat of ", item"; each prefix item before that is a rule,
  // optional once minItems is reached.
  const Seq sep = {GrammarBuilder::byte(','), ref(ws())};
  const int64_t first_rest = std::max<int64_t>(k, 1);
  Seq tail;
  if (rest_allowed && (hi < 0 || first_rest < hi)) {
    auto rep = b_.repeat(cat(cat(sep, rest_item), {ref(ws())}), std::max<int64_t>(0, lo - first_rest),
                         hi < 0 ? -1 : hi - first_rest, "items-rest");
    if (!rep.ok()) return err(rep.status().message(), ptr);
    tail = {*rep};
  }
  for (int64_t j = first_rest - 1; j >= 1; --j) {
    if (!b_.tick().ok()) return b_.status();
    if (hi >= 0 && j >= hi) continue;  // item j can never be written: tail stays empty
    const Seq written = cat(cat(cat(sep, item(j)), {ref(ws())}), tail);
    tail = {ref(j >= lo ? b_.group({written, {}}, "items") : b_.group({written}, "items"))};
  }
  const Seq first = cat(cat(item(0), {ref(ws())}), tail);
  if (lo > 0) return cat(cat(open, first), lit("]"));
  return cat(open, {ref(b_.group({first, {}}, "items-opt")), GrammarBuilder::byte(']')});
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> compile_json_schema(absl::string_view schema_text,
                                                                    const CompileLimits& limits,
                                                                    const CompileControl& control) {
  if (static_cast<int64_t>(schema_text.size()) > limits.max_text_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: schema of ", schema_text.size(),
                                                   " bytes exceeds max_text_bytes ", limits.max_text_bytes));
  }
  Json doc;
  if (absl::Status st = schema_doc::parse_schema(schema_text, control, &doc); !st.ok()) return st;
  try {
    return SchemaCompiler(limits, control, "json_schema").compile(&doc);
  } catch (const Json::exception& e) {
    // Only reachable through a schema shape the walk did not anticipate; still the request's fault.
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", e.what()));
  }
}

absl::StatusOr<std::shared_ptr<const Grammar>> compile_json_object(const CompileLimits& limits,
                                                                    const CompileControl& control) {
  return SchemaCompiler(limits, control, "json_object").compile(nullptr);
}

}  // namespace frost::constrain
