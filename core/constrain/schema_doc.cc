#include "core/constrain/schema_doc.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace frost::constrain::schema_doc {
namespace {

const absl::flat_hash_set<absl::string_view>& annotation_keywords() {
  static const auto* set = new absl::flat_hash_set<absl::string_view>{
      "title", "description", "examples", "default", "$schema", "$id", "$comment", "deprecated",
      "readOnly", "writeOnly", "$defs", "definitions", "$anchor"};
  return *set;
}

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

}  // namespace

bool is_annotation_keyword(absl::string_view key) { return annotation_keywords().contains(key); }

bool SchemaView::has_keywords_besides(absl::string_view except) const {
  std::vector<absl::string_view> hidden;  // keywords the views above this one hide
  for (const SchemaView* v = this; v != nullptr; v = v->base_) {
    for (const auto& [key, value] : v->own_->items()) {
      if (key == except || is_annotation_keyword(key)) continue;
      if (std::find(hidden.begin(), hidden.end(), key) != hidden.end()) continue;
      return true;
    }
    hidden.push_back(v->hidden_);
  }
  return false;
}

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

}  // namespace frost::constrain::schema_doc
