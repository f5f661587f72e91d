#pragma once
// The JSON Schema document as core/constrain/json_schema.cc reads it (internal to core/constrain): the text
// parsed into an ordered_json without recursion and in linear time, and the view through which a branch of
// anyOf / oneOf / allOf sees the keywords it inherits.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/constrain/grammar.h"

namespace frost::constrain::schema_doc {

// ordered_json keeps the schema's property order, which is the order members are generated in.
using Json = nlohmann::ordered_json;

constexpr int kMaxSchemaDepth = 128;  // nesting of inline subschemas and $ref chains; the text may nest twice that

// Parses `text` like nlohmann's DOM parser (a duplicate key keeps its first place and takes the last
// value), with three differences: object members are appended directly — ordered_json's own parser looks
// every key up linearly, quadratic in the members of an object (100k keys: 18 s); nesting past
// 2 * kMaxSchemaDepth is refused ("json_schema: JSON nests deeper than 256 levels"); and `control` is
// honoured per token. Errors are INVALID_ARGUMENT "json_schema: not valid JSON: …", or the control's
// DEADLINE_EXCEEDED / CANCELLED, prefixed "json_schema: ".
absl::Status parse_schema(absl::string_view text, const CompileControl& control, Json* out);

// Title, description, $defs, … : keywords that do not shape the value.
bool is_annotation_keyword(absl::string_view key);

// A schema object as the walk sees it: its own keywords and, for a branch of anyOf / oneOf / allOf, the
// keywords of the enclosing schema it inherits (minus that branching keyword) — a lookup chain instead of
// a merged copy, so nested branches cost no copying. The branch's own keywords win. `base` and `hidden`
// must outlive the view.
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
  bool has_keywords_besides(absl::string_view except) const;

 private:
  const Json* own_;
  const SchemaView* base_;
  absl::string_view hidden_;
};

}  // namespace frost::constrain::schema_doc
