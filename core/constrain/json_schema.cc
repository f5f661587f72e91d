#include "core/constrain/json_schema.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/constrain/regex.h"

namespace frost::constrain {
namespace {

// ordered_json keeps the schema's property order, which is the order members are generated in.
using Json = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 128;      // nesting of inline subschemas and $ref chains
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

const absl::flat_hash_set<absl::string_view>& annotation_keywords() {
  static const auto* set = new absl::flat_hash_set<absl::string_view>{
      "title", "description", "examples", "default", "$schema", "$id", "$comment", "deprecated",
      "readOnly", "writeOnly", "$defs", "definitions", "$anchor"};
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

// A schema object as the walk sees it: its own keywords and, for a branch of anyOf / oneOf / allOf, the
// keywords of the enclosing schema it inherits (minus that branching keyword) — a lookup chain instead of
// a merged copy, so nested branches cost no copying. The branch's own keywords win.
class SchemaView {
 public:
  explicit SchemaView(const Json& own, const SchemaView* base = nullptr, absl::string_view hidden = {})
      : own_(&own), base_(base), hidden_(hidden) {}
  const Json& own() const { return *own_; }
  bool inherits() const { return base_ != nullptr; }

  const Json* find(absl::string_view key) const {
    for (const SchemaView* v = this; v != nullptr; v = v->base_) {
      if (auto it = v->own_->find(key); it != v->own_->end()) return &*it;
      if (key == v->hidden_) return nullptr;
    }
    return nullptr;
  }
  bool contains(absl::string_view key) const { return find(key) != nullptr; }
  // True when a keyword other than `except` and the annotations is visible.
  bool has_keywords_besides(absl::string_view except) const {
    std::vector<absl::string_view> hidden;
    for (const SchemaView* v = this; v != nullptr; v = v->base_) {
      for (const auto& [key, value] : v->own_->items()) {
        if (key == except || annotation_keywords().contains(key)) continue;
        if (std::find(hidden.begin(), hidden.end(), key) != hidden.end()) continue;
        return true;
      }
      hidden.push_back(v->hidden_);
    }
    return false;
  }

 private:
  const Json* own_;
  const SchemaView* base_;
  absl::string_view hidden_;
};

// Builds the schema document like nlohmann's DOM parser (a duplicate key keeps its first place and takes
// the last value) with three differences: object members are appended directly — ordered_json's own
// parser looks every key up linearly, quadratic in the members of an object (100k keys: 18 s); nesting
// past 2 * kMaxSchemaDepth is refused; and the CompileControl is honoured per token.
class SchemaSax {
 public:
  SchemaSax(Json* root, CompileBudget* budget) : root_(root), budget_(budget) {}
  const absl::Status& status() const { return status_; }

  bool null() { return value(Json(nullptr)); }
  bool boolean(bool v) { return value(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return value(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return value(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return value(Json(v)); }
  bool string(Json::string_t& v) { return value(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return value(Json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(Json::string_t& k) {
    if (!tick()) return false;
    Frame& f = frames_.back();
    auto& members = static_cast<Members&>(f.node->get_ref<Json::object_t&>());
    // Small objects are searched; past kIndexFrom members a hash index takes over.
    constexpr size_t kIndexFrom = 16;
    if (members.size() == kIndexFrom && f.index.empty()) {
      for (size_t i = 0; i < members.size(); ++i) f.index.emplace(members[i].first, i);
    }
    if (members.size() >= kIndexFrom) {
      auto [it, inserted] = f.index.emplace(k, members.size());
      if (!inserted) {
        f.slot = it->second;
        return true;
      }
    } else {
      for (size_t i = 0; i < members.size(); ++i) {
        if (members[i].first == k) {
          f.slot = i;
          return true;
        }
      }
    }
    f.slot = members.size();
    members.emplace_back(std::move(k), Json());
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    status_ = absl::InvalidArgumentError(absl::StrCat("json_schema: not valid JSON: ", e.what()));
    return false;
  }

 private:
  using Members = std::vector<std::pair<const std::string, Json>>;  // ordered_map's storage
  struct Frame {
    Json* node;
    size_t slot = 0;  // objects: the member the next value goes to
    absl::flat_hash_map<std::string, size_t> index;
  };
  bool tick() {
    if (absl::Status st = budget_->tick(); !st.ok()) {
      status_ = absl::Status(st.code(), absl::StrCat("json_schema: ", st.message()));
      return false;
    }
    return true;
  }
  // Places `v` where the innermost container expects it; returns where it went.
  Json* place(Json&& v) {
    if (frames_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Frame& f = frames_.back();
    if (f.node->is_array()) {
      auto& items = f.node->get_ref<Json::array_t&>();
      items.push_back(std::move(v));
      return &items.back();
    }
    Json* slot = &static_cast<Members&>(f.node->get_ref<Json::object_t&>())[f.slot].second;
    *slot = std::move(v);
    return slot;
  }
  bool value(Json&& v) {
    if (!tick()) return false;
    place(std::move(v));
    return true;
  }
  bool open(Json&& container) {
    if (!tick()) return false;
    if (frames_.size() >= 2 * kMaxSchemaDepth) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("json_schema: JSON nests deeper than ", 2 * kMaxSchemaDepth, " levels"));
      return false;
    }
    Json* node = place(std::move(container));
    frames_.push_back({node, 0, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return tick();
  }

  Json* root_;
  CompileBudget* budget_;
  std::vector<Frame> frames_;
  absl::Status status_;
};

absl::Status parse_schema(absl::string_view text, const CompileControl& control, Json* out) {
  CompileBudget budget(control);
  SchemaSax sax(out, &budget);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: not valid JSON: ", e.what()));
  }
  if (!sax.status().ok()) return sax.status();
  if (!ok) return absl::InvalidArgumentError("json_schema: not valid JSON");
  return absl::OkStatus();
}

class SchemaCompiler {
 public:
  SchemaCompiler(const CompileLimits& limits, const CompileControl& control) : b_(limits, control) {}

  absl::StatusOr<std::shared_ptr<const Grammar>> compile(const Json* doc) {
    doc_ = doc;
    const uint32_t root = b_.add_rule("root");
    if (doc == nullptr) {
      b_.add_alternative(root, {GrammarBuilder::ref(any_object())});
    } else {
      auto seq = visit(*doc, "", 0);
      // Builder statuses (size limits, the CompileControl) carry no prefix; the walk's own errors do.
      if (!b_.status().ok()) return prefixed(b_.status());
      if (!seq.ok()) return seq.status();
      b_.add_alternative(root, std::move(*seq));
    }
    auto g = b_.build(root);
    if (!g.ok()) {
      std::string msg = absl::StrCat("json_schema: ", g.status().message());
      if (!first_empty_.empty() && absl::StartsWith(g.status().message(), "unsatisfiable")) {
        absl::StrAppend(&msg, " (first empty construct: ", first_empty_, ")");
      }
      return absl::Status(g.status().code(), msg);
    }
    return g;
  }

 private:
  static absl::Status prefixed(const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("json_schema: ", st.message()));
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
  uint32_t string_char() {
    if (char_) return *char_;
    char_ = b_.add_rule("char");
    b_.add_alternative(*char_, {b_.codepoints(complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}))});
    ByteSet esc;
    for (char c : absl::string_view("\"\\/bfnrt")) esc.set(static_cast<uint8_t>(c));
    b_.add_alternative(*char_, {GrammarBuilder::byte('\\'), GrammarBuilder::bytes(esc)});
    // \uXXXX except the surrogates D800-DFFF: strict parsers reject an unpaired one, and a pair would
    // need two escapes to agree. Characters past U+FFFF are written raw (UTF-8) instead.
    const Elem hex = b_.codepoints({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    const Elem u = GrammarBuilder::byte('u'), backslash = GrammarBuilder::byte('\\');
    b_.add_alternative(*char_, {backslash, u, b_.codepoints({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}}),
                                hex, hex, hex});
    b_.add_alternative(*char_, {backslash, u, b_.codepoints({{'D', 'D'}, {'d', 'd'}}), b_.codepoints({{'0', '7'}}), hex, hex});
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
  absl::StatusOr<Seq> visit(const Json& s, const std::string& ptr, int depth);
  absl::StatusOr<Seq> visit_view(const SchemaView& s, const std::string& ptr, int depth);
  absl::StatusOr<Seq> visit_ref(const std::string& target, const std::string& ptr, int depth);
  absl::StatusOr<Seq> visit_branches(const SchemaView& s, const std::string& key, const std::string& ptr, int depth);
  std::optional<std::vector<std::string>> literal_branches(const SchemaView& s, const std::string& key,
                                                           const Json& branches, bool has_siblings);
  absl::StatusOr<Seq> visit_type(absl::string_view type, const SchemaView& s, const std::string& ptr,
                                 const std::string& type_ptr, int depth);
  absl::StatusOr<Seq> visit_string(const SchemaView& s, const std::string& ptr);
  absl::StatusOr<Seq> visit_integer(const SchemaView& s, const std::string& ptr);
  absl::StatusOr<Seq> visit_object(const SchemaView& s, const std::string& ptr, int depth);
  absl::StatusOr<Seq> visit_array(const SchemaView& s, const std::string& ptr, int depth);
  absl::StatusOr<std::optional<int64_t>> count(const SchemaView& s, absl::string_view key, const std::string& ptr);

  GrammarBuilder b_;
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

absl::StatusOr<Seq> SchemaCompiler::visit(const Json& s, const std::string& ptr, int depth) {
  if (auto it = memo_.find(&s); it != memo_.end()) return it->second;
  auto seq = visit_view(SchemaView(s), ptr, depth);
  if (!seq.ok()) return seq;
  if (seq->size() > kMaxInlineSeq) *seq = {ref(b_.group({std::move(*seq)}, "schema"))};
  memo_.emplace(&s, *seq);
  return seq;
}

absl::StatusOr<Seq> SchemaCompiler::visit_view(const SchemaView& s, const std::string& ptr, int depth) {
  if (depth > kMaxSchemaDepth) return err(absl::StrCat("schema nests deeper than ", kMaxSchemaDepth), ptr);
  if (!b_.tick().ok()) return b_.status();
  const Json& own = s.own();
  if (own.is_boolean()) return own.get<bool>() ? Seq{ref(any_value())} : nothing("schema false", ptr);
  if (!own.is_object()) return err("schema must be an object or a boolean", ptr);
  // Inherited keywords were checked where they are written.
  for (const auto& [key, value] : own.items()) {
    if (refused_keywords().contains(key)) return err(absl::StrCat("unsupported keyword '", key, "'"), child(ptr, key));
    if (key == "uniqueItems" && value == true) return err("unsupported keyword 'uniqueItems'", child(ptr, key));
  }
  if (const Json* r = s.find("$ref")) {
    if (!r->is_string()) return err("$ref must be a string", child(ptr, "$ref"));
    return visit_ref(r->get<std::string>(), child(ptr, "$ref"), depth);
  }
  if (s.contains("anyOf") && s.contains("oneOf")) return err("anyOf together with oneOf is unsupported", ptr);
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (s.contains(key)) return visit_branches(s, key, ptr, depth);
  }
  if (const Json* c = s.find("const")) return lit(c->dump());
  if (const Json* e = s.find("enum")) {
    if (!e->is_array()) return err("enum must be an array", child(ptr, "enum"));
    if (e->empty()) return nothing("enum []", child(ptr, "enum"));
    // One trie over the values' compact texts: duplicates merge, and one parse survives each byte however
    // many values there are.
    std::vector<std::string> words;
    words.reserve(e->size());
    for (const Json& v : *e) {
      if (!b_.tick().ok()) return b_.status();
      words.push_back(v.dump());
    }
    return b_.literal_trie(std::move(words), "enum");
  }
  const Json* type = s.find("type");
  if (type == nullptr) {
    // No type: infer it from the keywords that only make sense for one type, else any value.
    auto has = [&](std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
    };
    if (has({"properties", "required", "additionalProperties"})) return visit_type("object", s, ptr, ptr, depth);
    if (has({"items", "prefixItems", "minItems", "maxItems"})) return visit_type("array", s, ptr, ptr, depth);
    if (has({"minLength", "maxLength", "pattern", "format"})) return visit_type("string", s, ptr, ptr, depth);
    return Seq{ref(any_value())};
  }
  const std::string type_ptr = child(ptr, "type");
  if (type->is_string()) return visit_type(type->get<std::string>(), s, ptr, type_ptr, depth);
  if (!type->is_array()) return err("type must be a string or an array of strings", type_ptr);
  if (type->empty()) return nothing("type []", type_ptr);
  std::vector<Seq> alts;
  for (size_t i = 0; i < type->size(); ++i) {
    if (!(*type)[i].is_string()) return err("type must be a string or an array of strings", type_ptr);
    auto alt = visit_type((*type)[i].get<std::string>(), s, ptr, child(type_ptr, std::to_string(i)), depth);
    if (!alt.ok()) return alt.status();
    alts.push_back(std::move(*alt));
  }
  return Seq{ref(b_.group(std::move(alts), "types"))};
}

absl::StatusOr<Seq> SchemaCompiler::visit_ref(const std::string& target, const std::string& ptr, int depth) {
  if (target.empty() || target[0] != '#') return err(absl::StrCat("unsupported remote $ref '", target, "'"), ptr);
  if (auto it = ref_rules_.find(target); it != ref_rules_.end()) return Seq{ref(it->second)};
  const Json* node = nullptr;
  try {
    node = &doc_->at(Json::json_pointer(target.substr(1)));
  } catch (const Json::exception&) {
    return err(absl::StrCat("$ref '", target, "' does not resolve"), ptr);
  }
  // The rule exists before its body is compiled, so a recursive reference finds it.
  const uint32_t rule = b_.add_rule(absl::StrCat("ref", target.substr(1)));
  ref_rules_[target] = rule;
  auto body = visit(*node, target.substr(1), depth + 1);
  if (!body.ok()) return body.status();
  b_.add_alternative(rule, std::move(*body));
  return Seq{ref(rule)};
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

absl::StatusOr<Seq> SchemaCompiler::visit_branches(const SchemaView& s, const std::string& key, const std::string& ptr,
                                                   int depth) {
  const Json& branches = *s.find(key);
  const std::string list_ptr = child(ptr, key);
  if (!branches.is_array()) return err(absl::StrCat(key, " must be an array"), list_ptr);
  if (key == "allOf" && branches.size() != 1) {
    return err(absl::StrCat("allOf with ", branches.size(), " schemas is unsupported (only one)"), list_ptr);
  }
  if (branches.empty()) return nothing(absl::StrCat(key, " []"), list_ptr);
  // Siblings of anyOf/oneOf/allOf apply to every branch: each branch is walked as a view over its own
  // keywords and the siblings (the branch wins on conflicts) — nothing is copied.
  const bool has_siblings = s.has_keywords_besides(key);
  if (auto words = literal_branches(s, key, branches, has_siblings)) return b_.literal_trie(std::move(*words), key);
  if (!b_.status().ok()) return b_.status();
  std::vector<Seq> alts;
  for (size_t i = 0; i < branches.size(); ++i) {
    const std::string branch_ptr = child(list_ptr, std::to_string(i));
    const Json& branch = branches[i];
    absl::StatusOr<Seq> alt = !has_siblings || !branch.is_object()
                                  ? visit(branch, branch_ptr, depth + 1)
                                  : visit_view(SchemaView(branch, &s, key), branch_ptr, depth + 1);
    if (!alt.ok()) return alt.status();
    alts.push_back(std::move(*alt));
  }
  if (alts.size() == 1) return alts[0];
  return Seq{ref(b_.group(std::move(alts), key))};
}

// `ptr` is the schema's pointer, `type_ptr` the pointer of the type name (for the unknown-type error).
absl::StatusOr<Seq> SchemaCompiler::visit_type(absl::string_view type, const SchemaView& s, const std::string& ptr,
                                               const std::string& type_ptr, int depth) {
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
  if (type == "object") return visit_object(s, ptr, depth);
  if (type == "array") return visit_array(s, ptr, depth);
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

absl::StatusOr<Seq> SchemaCompiler::visit_object(const SchemaView& s, const std::string& ptr, int depth) {
  struct Member {
    Seq kv;  // "name" ":" ws value
    bool required;
  };
  std::vector<Member> members;
  absl::flat_hash_set<std::string> required;
  const Json* req = s.find("required");
  if (req != nullptr) {
    if (!req->is_array()) return err("required must be an array of strings", child(ptr, "required"));
    for (const Json& r : *req) {
      if (!r.is_string()) return err("required must be an array of strings", child(ptr, "required"));
      required.insert(r.get<std::string>());
    }
  }
  const Seq colon = {GrammarBuilder::byte(':'), ref(ws())};
  absl::flat_hash_set<std::string> listed;
  const Json* props = s.find("properties");
  if (props != nullptr) {
    if (!props->is_object()) return err("properties must be an object", child(ptr, "properties"));
    const std::string props_ptr = child(ptr, "properties");
    for (const auto& [name, sub] : props->items()) {
      auto value = visit(sub, child(props_ptr, name), depth + 1);
      if (!value.ok()) return value.status();
      members.push_back({cat(cat(lit(Json(name).dump()), colon), *value), required.contains(name)});
      listed.insert(name);
    }
  }
  if (req != nullptr) {
    for (const Json& r : *req) {
      const std::string name = r.get<std::string>();
      if (listed.insert(name).second) members.push_back({cat(cat(lit(Json(name).dump()), colon), {ref(any_value())}), true});
    }
  }
  // Extra members: additionalProperties absent means false when properties are listed, else true.
  std::optional<Seq> extra;
  const Json* add = s.find("additionalProperties");
  if (add == nullptr ? props == nullptr : (add->is_boolean() ? add->get<bool>() : true)) {
    Seq value = {ref(any_value())};
    if (add != nullptr && add->is_object()) {
      auto v = visit(*add, child(ptr, "additionalProperties"), depth + 1);
      if (!v.ok()) return v.status();
      value = std::move(*v);
    } else if (add != nullptr && !add->is_boolean()) {
      return err("additionalProperties must be a boolean or a schema", child(ptr, "additionalProperties"));
    }
    extra = cat(cat({ref(any_string())}, colon), value);
  }
  // first[i]: members i.. when none was written yet; later[i]: members i.. after one was written (so each
  // starts with a comma). Optional members may be skipped, in order.
  const size_t n = members.size();
  const Seq sep = {GrammarBuilder::byte(','), ref(ws())};
  std::vector<uint32_t> first(n + 1), later(n + 1);
  later[n] = b_.add_rule("members-rest");
  first[n] = b_.add_rule("members-rest");
  if (extra) {
    const uint32_t loop = b_.repeat_internal(cat(cat(sep, *extra), {ref(ws())}), 0, -1, "extra-members");
    b_.add_alternative(later[n], {ref(loop)});
    b_.add_alternative(first[n], cat(*extra, {ref(ws()), ref(later[n])}));
  }
  b_.add_alternative(first[n], {});
  if (!extra) b_.add_alternative(later[n], {});
  for (size_t i = n; i-- > 0;) {
    if (!b_.tick().ok()) return b_.status();
    later[i] = b_.add_rule("members");
    first[i] = b_.add_rule("members");
    const Seq written = cat(members[i].kv, {ref(ws()), ref(later[i + 1])});
    b_.add_alternative(later[i], cat(sep, written));
    b_.add_alternative(first[i], written);
    if (!members[i].required) {
      b_.add_alternative(later[i], {ref(later[i + 1])});
      b_.add_alternative(first[i], {ref(first[i + 1])});
    }
  }
  return Seq{GrammarBuilder::byte('{'), ref(ws()), ref(first[0]), GrammarBuilder::byte('}')};
}

absl::StatusOr<Seq> SchemaCompiler::visit_array(const SchemaView& s, const std::string& ptr, int depth) {
  std::vector<Seq> prefix;
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
      auto item = visit((*prefix_list)[i], child(prefix_ptr, std::to_string(i)), depth + 1);
      if (!item.ok()) return item.status();
      prefix.push_back(std::move(*item));
    }
  }
  Seq rest_item = {ref(any_value())};
  bool rest_allowed = true;
  if (rest != nullptr && rest->is_boolean()) {
    rest_allowed = rest->get<bool>();
  } else if (rest != nullptr) {
    auto item = visit(*rest, rest_ptr, depth + 1);
    if (!item.ok()) return item.status();
    rest_item = std::move(*item);
  }
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
  if (absl::Status st = parse_schema(schema_text, control, &doc); !st.ok()) return st;
  try {
    return SchemaCompiler(limits, control).compile(&doc);
  } catch (const Json::exception& e) {
    // Only reachable through a schema shape the walk did not anticipate; still the request's fault.
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", e.what()));
  }
}

absl::StatusOr<std::shared_ptr<const Grammar>> compile_json_object(const CompileLimits& limits,
                                                                    const CompileControl& control) {
  return SchemaCompiler(limits, control).compile(nullptr);
}

}  // namespace frost::constrain
