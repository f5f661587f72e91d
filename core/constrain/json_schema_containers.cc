// Objects and arrays of the JSON Schema walk (json_schema_internal.h): which members and items may appear, in
// which order, how many, and the grammar that writes them.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/constrain/json_schema_internal.h"

namespace frost::constrain::schema_internal {

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

}  // namespace frost::constrain::schema_internal
