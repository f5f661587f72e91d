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
#include "absl/strings/str_cat.h"
#include "core/constrain/regex.h"

namespace frost::constrain {
namespace {

// ordered_json keeps the schema's property order, which is the order members are generated in.
using Json = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 128;   // nesting of inline subschemas (refs do not nest the compiler)
constexpr int64_t kMaxEnumerated = 1000;  // integer ranges up to this many values are enforced exactly

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

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const CompileLimits& limits) : b_(limits) {}

  absl::StatusOr<std::shared_ptr<const Grammar>> compile(const Json* doc) {
    doc_ = doc;
    const uint32_t root = b_.add_rule("root");
    if (doc == nullptr) {
      b_.add_alternative(root, {GrammarBuilder::ref(any_object())});
    } else {
      auto seq = visit(*doc, "", 0);
      if (!seq.ok()) return seq.status();
      b_.add_alternative(root, std::move(*seq));
    }
    auto g = b_.build(root);
    if (!g.ok()) {
      std::string msg = absl::StrCat("json_schema: ", g.status().message());
      if (!first_empty_.empty()) absl::StrAppend(&msg, " (first empty construct: ", first_empty_, ")");
      return absl::InvalidArgumentError(msg);
    }
    return g;
  }

 private:
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
  uint32_t any_object() {
    if (!object_) object_ = b_.add_rule("object");
    if (b_.n_alternatives(*object_) == 0) {
      const uint32_t list = list_of('{', any_member(), '}', "object-members");
      b_.add_alternative(*object_, {ref(list)});
    }
    return *object_;
  }
  uint32_t any_array() {
    if (!array_) array_ = b_.add_rule("array");
    if (b_.n_alternatives(*array_) == 0) {
      const uint32_t list = list_of('[', {ref(any_value())}, ']', "array-items");
      b_.add_alternative(*array_, {ref(list)});
    }
    return *array_;
  }

  // ---- schema walk ----
  absl::StatusOr<Seq> visit(const Json& s, const std::string& ptr, int depth);
  absl::StatusOr<Seq> visit_ref(const std::string& target, const std::string& ptr, int depth);
  absl::StatusOr<Seq> visit_branches(const Json& s, const std::string& key, const std::string& ptr, int depth);
  absl::StatusOr<Seq> visit_type(absl::string_view type, const Json& s, const std::string& ptr,
                                 const std::string& type_ptr, int depth);
  absl::StatusOr<Seq> visit_string(const Json& s, const std::string& ptr);
  absl::StatusOr<Seq> visit_integer(const Json& s, const std::string& ptr);
  absl::StatusOr<Seq> visit_object(const Json& s, const std::string& ptr, int depth);
  absl::StatusOr<Seq> visit_array(const Json& s, const std::string& ptr, int depth);
  absl::StatusOr<std::optional<int64_t>> count(const Json& s, absl::string_view key, const std::string& ptr);
  Seq decimal_trie(const std::vector<std::string>& words, size_t begin, size_t end, size_t depth);

  GrammarBuilder b_;
  const Json* doc_ = nullptr;
  std::optional<uint32_t> ws_, char_, string_, number_body_, number_, value_, object_, array_;
  absl::flat_hash_map<std::string, uint32_t> ref_rules_;
  std::string first_empty_;
};

absl::StatusOr<Seq> SchemaCompiler::visit(const Json& s, const std::string& ptr, int depth) {
  if (depth > kMaxSchemaDepth) return err(absl::StrCat("schema nests deeper than ", kMaxSchemaDepth), ptr);
  if (s.is_boolean()) return s.get<bool>() ? Seq{ref(any_value())} : nothing("schema false", ptr);
  if (!s.is_object()) return err("schema must be an object or a boolean", ptr);
  for (const auto& [key, value] : s.items()) {
    if (refused_keywords().contains(key)) return err(absl::StrCat("unsupported keyword '", key, "'"), child(ptr, key));
    if (key == "uniqueItems" && value == true) return err("unsupported keyword 'uniqueItems'", child(ptr, key));
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return err("$ref must be a string", child(ptr, "$ref"));
    return visit_ref(it->get<std::string>(), child(ptr, "$ref"), depth);
  }
  if (s.contains("anyOf") && s.contains("oneOf")) return err("anyOf together with oneOf is unsupported", ptr);
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    if (s.contains(key)) return visit_branches(s, key, ptr, depth);
  }
  if (auto it = s.find("const"); it != s.end()) return lit(it->dump());
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array()) return err("enum must be an array", child(ptr, "enum"));
    if (it->empty()) return nothing("enum []", child(ptr, "enum"));
    std::vector<Seq> alts;
    for (const Json& v : *it) alts.push_back(lit(v.dump()));
    return Seq{ref(b_.group(std::move(alts), "enum"))};
  }
  auto type = s.find("type");
  if (type == s.end()) {
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

absl::StatusOr<Seq> SchemaCompiler::visit_branches(const Json& s, const std::string& key, const std::string& ptr,
                                                   int depth) {
  const Json& branches = s.at(key);
  const std::string list_ptr = child(ptr, key);
  if (!branches.is_array()) return err(absl::StrCat(key, " must be an array"), list_ptr);
  if (key == "allOf" && branches.size() != 1) {
    return err(absl::StrCat("allOf with ", branches.size(), " schemas is unsupported (only one)"), list_ptr);
  }
  if (branches.empty()) return nothing(absl::StrCat(key, " []"), list_ptr);
  // Siblings of anyOf/oneOf/allOf apply to every branch: merge them in (the branch wins on conflicts).
  Json siblings = s;
  siblings.erase(key);
  bool has_siblings = false;
  for (const auto& [k, v] : siblings.items()) has_siblings = has_siblings || !annotation_keywords().contains(k);
  std::vector<Seq> alts;
  for (size_t i = 0; i < branches.size(); ++i) {
    const std::string branch_ptr = child(list_ptr, std::to_string(i));
    const Json& branch = branches[i];
    absl::StatusOr<Seq> alt;
    if (!has_siblings || !branch.is_object()) {
      alt = visit(branch, branch_ptr, depth + 1);
    } else {
      Json merged = siblings;
      for (const auto& [k, v] : branch.items()) merged[k] = v;
      alt = visit(merged, branch_ptr, depth + 1);
    }
    if (!alt.ok()) return alt.status();
    alts.push_back(std::move(*alt));
  }
  if (alts.size() == 1) return alts[0];
  return Seq{ref(b_.group(std::move(alts), key))};
}

// `ptr` is the schema's pointer, `type_ptr` the pointer of the type name (for the unknown-type error).
absl::StatusOr<Seq> SchemaCompiler::visit_type(absl::string_view type, const Json& s, const std::string& ptr,
                                               const std::string& type_ptr, int depth) {
  const std::string& schema_ptr = ptr;
  if (type == "string") return visit_string(s, schema_ptr);
  if (type == "integer") return visit_integer(s, schema_ptr);
  if (type == "number") {
    for (const char* k : {"minimum", "exclusiveMinimum"}) {
      if (s.contains(k) && s[k].is_number() && s[k].get<double>() >= 0) return Seq{ref(number_body())};
    }
    return Seq{ref(any_number())};
  }
  if (type == "boolean") return Seq{ref(b_.group({lit("true"), lit("false")}, "boolean"))};
  if (type == "null") return lit("null");
  if (type == "object") return visit_object(s, schema_ptr, depth);
  if (type == "array") return visit_array(s, schema_ptr, depth);
  return err(absl::StrCat("unknown type '", type, "'"), type_ptr);
}

absl::StatusOr<std::optional<int64_t>> SchemaCompiler::count(const Json& s, absl::string_view key,
                                                            const std::string& ptr) {
  auto it = s.find(key);
  if (it == s.end()) return std::optional<int64_t>();
  if (!it->is_number_unsigned()) return err(absl::StrCat(key, " must be a non-negative integer"), child(ptr, key));
  const uint64_t v = it->get<uint64_t>();
  if (v > static_cast<uint64_t>(b_.limits().max_repeat)) {
    return err(absl::StrCat(key, " ", v, " exceeds max_repeat ", b_.limits().max_repeat), child(ptr, key));
  }
  return std::optional<int64_t>(static_cast<int64_t>(v));
}

absl::StatusOr<Seq> SchemaCompiler::visit_string(const Json& s, const std::string& ptr) {
  const Elem quote = GrammarBuilder::byte('"');
  std::string pattern;
  std::string pattern_ptr = child(ptr, "pattern");
  if (auto it = s.find("pattern"); it != s.end()) {
    if (!it->is_string()) return err("pattern must be a string", pattern_ptr);
    pattern = it->get<std::string>();
  } else if (auto f = s.find("format"); f != s.end() && f->is_string()) {
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
  auto body = b_.repeat({ref(string_char())}, lo, hi, "string-chars");
  if (!body.ok()) return err(body.status().message(), ptr);
  return Seq{quote, ref(*body), quote};
}

Seq SchemaCompiler::decimal_trie(const std::vector<std::string>& words, size_t begin, size_t end, size_t depth) {
  // Words are sorted, so the ones sharing a prefix are contiguous; one rule per trie node keeps the
  // recogniser deterministic (a single stack) however many values the range has.
  std::vector<Seq> alts;
  size_t i = begin;
  if (words[i].size() == depth) {
    alts.push_back({});
    ++i;
  }
  while (i < end) {
    size_t j = i;
    while (j < end && words[j][depth] == words[i][depth]) ++j;
    alts.push_back(cat({GrammarBuilder::byte(static_cast<uint8_t>(words[i][depth]))}, decimal_trie(words, i, j, depth + 1)));
    i = j;
  }
  if (alts.size() == 1 && alts[0].empty()) return {};
  return {ref(b_.group(std::move(alts), "int-range"))};
}

absl::StatusOr<Seq> SchemaCompiler::visit_integer(const Json& s, const std::string& ptr) {
  // Bounds as integers; draft-4 boolean exclusiveMinimum/Maximum modify minimum/maximum.
  constexpr double kHuge = 9e15;
  std::optional<double> lo, hi;
  auto read = [&](const char* key) -> std::optional<double> {
    auto it = s.find(key);
    if (it == s.end() || !it->is_number()) return std::nullopt;
    return std::clamp(it->get<double>(), -kHuge, kHuge);
  };
  const bool excl_min_bool = s.contains("exclusiveMinimum") && s["exclusiveMinimum"] == true;
  const bool excl_max_bool = s.contains("exclusiveMaximum") && s["exclusiveMaximum"] == true;
  if (auto v = read("minimum")) lo = excl_min_bool ? std::floor(*v) + 1 : std::ceil(*v);
  if (auto v = read("exclusiveMinimum")) lo = std::max(lo.value_or(-kHuge), std::floor(*v) + 1);
  if (auto v = read("maximum")) hi = excl_max_bool ? std::ceil(*v) - 1 : std::floor(*v);
  if (auto v = read("exclusiveMaximum")) hi = std::min(hi.value_or(kHuge), std::ceil(*v) - 1);
  if (lo && hi && *lo > *hi) return nothing("minimum > maximum", ptr);
  if (lo && hi && *hi - *lo < kMaxEnumerated) {
    std::vector<std::string> words;
    for (auto v = static_cast<int64_t>(*lo); v <= static_cast<int64_t>(*hi); ++v) words.push_back(std::to_string(v));
    std::sort(words.begin(), words.end());
    return decimal_trie(words, 0, words.size(), 0);
  }
  if (lo && *lo >= 1) return digits(false);
  if (lo && *lo >= 0) return digits(true);
  if (hi && *hi <= -1) return cat(lit("-"), digits(false));
  if (hi && *hi <= 0) return Seq{ref(b_.group({lit("0"), cat(lit("-"), digits(false))}, "nonpos"))};
  return Seq{ref(b_.group({digits(true), cat(lit("-"), digits(false))}, "integer"))};
}

absl::StatusOr<Seq> SchemaCompiler::visit_object(const Json& s, const std::string& ptr, int depth) {
  struct Member {
    Seq kv;  // "name" ":" ws value
    bool required;
  };
  std::vector<Member> members;
  absl::flat_hash_set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) return err("required must be an array of strings", child(ptr, "required"));
    for (const Json& r : *it) {
      if (!r.is_string()) return err("required must be an array of strings", child(ptr, "required"));
      required.insert(r.get<std::string>());
    }
  }
  const Seq colon = {GrammarBuilder::byte(':'), ref(ws())};
  absl::flat_hash_set<std::string> listed;
  auto props = s.find("properties");
  if (props != s.end()) {
    if (!props->is_object()) return err("properties must be an object", child(ptr, "properties"));
    for (const auto& [name, sub] : props->items()) {
      auto value = visit(sub, child(child(ptr, "properties"), name), depth + 1);
      if (!value.ok()) return value.status();
      members.push_back({cat(cat(lit(Json(name).dump()), colon), *value), required.contains(name)});
      listed.insert(name);
    }
  }
  if (auto it = s.find("required"); it != s.end()) {
    for (const Json& r : *it) {
      const std::string name = r.get<std::string>();
      if (listed.insert(name).second) members.push_back({cat(cat(lit(Json(name).dump()), colon), {ref(any_value())}), true});
    }
  }
  // Extra members: additionalProperties absent means false when properties are listed, else true.
  std::optional<Seq> extra;
  auto add = s.find("additionalProperties");
  if (add == s.end() ? props == s.end() : (add->is_boolean() ? add->get<bool>() : true)) {
    Seq value = {ref(any_value())};
    if (add != s.end() && add->is_object()) {
      auto v = visit(*add, child(ptr, "additionalProperties"), depth + 1);
      if (!v.ok()) return v.status();
      value = std::move(*v);
    } else if (add != s.end() && !add->is_boolean()) {
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

absl::StatusOr<Seq> SchemaCompiler::visit_array(const Json& s, const std::string& ptr, int depth) {
  std::vector<Seq> prefix;
  const Json* prefix_list = nullptr;
  std::string prefix_ptr;
  const Json* rest = nullptr;  // schema of the items after the prefix; nullptr = any value
  std::string rest_ptr;
  auto items = s.find("items");
  if (auto it = s.find("prefixItems"); it != s.end()) {
    prefix_list = &*it;
    prefix_ptr = child(ptr, "prefixItems");
    if (items != s.end()) rest = &*items, rest_ptr = child(ptr, "items");
  } else if (items != s.end() && items->is_array()) {
    prefix_list = &*items;  // draft 4: items as a list, additionalItems for the rest
    prefix_ptr = child(ptr, "items");
    if (auto a = s.find("additionalItems"); a != s.end()) rest = &*a, rest_ptr = child(ptr, "additionalItems");
  } else if (items != s.end()) {
    rest = &*items;
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
  auto item = [&](int64_t j) { return j < k ? prefix[j] : rest_item; };
  // after[j]: what may follow once j items were written — stop (when j >= minItems) or ", item" and on.
  // Past the prefix and the minimum, an unbounded tail is a single loop rule.
  const Seq sep = {GrammarBuilder::byte(','), ref(ws())};
  std::vector<uint32_t> after;
  int64_t j = 1;
  for (;; ++j) {
    if (hi < 0 && j >= k && j >= lo) {
      after.push_back(b_.repeat_internal(cat(cat(sep, rest_item), {ref(ws())}), 0, -1, "items-rest"));
      break;
    }
    after.push_back(b_.add_rule("items"));
    if (hi >= 0 && j >= hi) break;
  }
  for (int64_t m = static_cast<int64_t>(after.size()) - 1; m >= 0; --m) {
    const int64_t idx = m + 1;  // items written
    const uint32_t r = after[m];
    if (hi < 0 && idx >= k && idx >= lo) continue;  // the loop rule
    if (idx >= lo) b_.add_alternative(r, {});
    if (hi < 0 || idx < hi) b_.add_alternative(r, cat(cat(sep, item(idx)), {ref(ws()), ref(after[m + 1])}));
  }
  Seq open = {GrammarBuilder::byte('['), ref(ws())};
  if (hi == 0) return cat(open, lit("]"));
  const Seq first = cat(item(0), {ref(ws()), ref(after[0])});
  if (lo > 0) return cat(cat(open, first), lit("]"));
  return cat(open, {ref(b_.group({first, {}}, "items-opt")), GrammarBuilder::byte(']')});
}

absl::Status parse_schema(absl::string_view text, Json* out) {
  struct TooDeep {};
  int depth = 0;
  Json::parser_callback_t cb = [&depth](int, Json::parse_event_t ev, Json&) -> bool {
    if (ev == Json::parse_event_t::object_start || ev == Json::parse_event_t::array_start) {
      if (++depth > 2 * kMaxSchemaDepth) throw TooDeep{};
    } else if (ev == Json::parse_event_t::object_end || ev == Json::parse_event_t::array_end) {
      --depth;
    }
    return true;
  };
  try {
    *out = Json::parse(text.begin(), text.end(), cb);
  } catch (const TooDeep&) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: JSON nests deeper than ", 2 * kMaxSchemaDepth, " levels"));
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: not valid JSON: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> compile_json_schema(absl::string_view schema_text,
                                                                    const CompileLimits& limits) {
  if (static_cast<int64_t>(schema_text.size()) > limits.max_text_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: schema of ", schema_text.size(),
                                                   " bytes exceeds max_text_bytes ", limits.max_text_bytes));
  }
  Json doc;
  if (absl::Status st = parse_schema(schema_text, &doc); !st.ok()) return st;
  try {
    return SchemaCompiler(limits).compile(&doc);
  } catch (const Json::exception& e) {
    // Only reachable through a schema shape the walk did not anticipate; still the request's fault.
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", e.what()));
  }
}

absl::StatusOr<std::shared_ptr<const Grammar>> compile_json_object(const CompileLimits& limits) {
  return SchemaCompiler(limits).compile(nullptr);
}

}  // namespace frost::constrain
