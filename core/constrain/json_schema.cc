#include "core/constrain/json_schema.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/constrain/json_schema_internal.h"
#include "core/constrain/regex.h"

namespace frost::constrain {
namespace schema_internal {

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

}  // namespace schema_internal

using schema_internal::Json;
using schema_internal::SchemaCompiler;

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

