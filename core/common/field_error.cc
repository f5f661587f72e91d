#include "core/common/field_error.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace frost {
namespace {

// One payload per part, so that reading one back needs no parsing.
constexpr absl::string_view kFieldUrl = "type.frost.dev/frost.FieldError.field";
constexpr absl::string_view kSubscriptUrl = "type.frost.dev/frost.FieldError.subscript";
constexpr absl::string_view kDetailUrl = "type.frost.dev/frost.FieldError.detail";

}  // namespace

absl::Status with_field(absl::Status st, const FieldError& e) {
  if (st.ok()) return st;
  st.SetPayload(kFieldUrl, absl::Cord(e.field));
  st.SetPayload(kSubscriptUrl, absl::Cord(e.subscript));
  st.SetPayload(kDetailUrl, absl::Cord(e.detail));
  return st;
}

absl::Status field_error(absl::StatusCode code, absl::string_view field, absl::string_view detail,
                         absl::string_view subscript) {
  return with_field(absl::Status(code, absl::StrCat(field, subscript, " ", detail)),
                    {std::string(field), std::string(subscript), std::string(detail)});
}

absl::Status invalid_field(absl::string_view field, absl::string_view detail, absl::string_view subscript) {
  return field_error(absl::StatusCode::kInvalidArgument, field, detail, subscript);
}

absl::Status prefix_field(const absl::Status& st, absl::string_view field) {
  if (st.ok()) return st;
  return with_field(absl::Status(st.code(), absl::StrCat(field, ": ", st.message())),
                    {std::string(field), "", std::string(st.message())});
}

std::optional<FieldError> field_error_of(const absl::Status& st) {
  if (st.ok()) return std::nullopt;
  auto field = st.GetPayload(kFieldUrl);
  if (!field) return std::nullopt;
  FieldError e;
  e.field = std::string(*field);
  if (auto s = st.GetPayload(kSubscriptUrl)) e.subscript = std::string(*s);
  if (auto d = st.GetPayload(kDetailUrl)) e.detail = std::string(*d);
  return e;
}

}  // namespace frost
