#pragma once
// A request error that carries the field it belongs to as data, not as text to parse: an absl::Status payload
// with the field's canonical name (the core's own name for it, e.g. core/generate/request.h's "top_p",
// "stop", "prompt", "constraint"), a subscript for an element of a list field ("[2]"), and the problem
// without the field ("must be in (0, 1], got 2"). The status message stays the core's whole sentence (logs,
// direct callers); each transport maps the canonical name to its own field name (gRPC's "sampling.top_p" in
// server/generation_codec.cc, the OpenAI body's "top_p" in server/openai_api.cc) and writes
// "<its field><subscript>: <detail>". A payload survives copies of the status, not a new status built from
// its message: code that rewraps an error keeps the field with with_field() or field_error_of().
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace frost {

struct FieldError {
  std::string field;      // canonical name
  std::string subscript;  // "[i]" for an element of a list field; "" for the field itself
  std::string detail;     // the problem, without the field
};

// `st` with `e` attached (st's code and message kept). OK stays OK.
absl::Status with_field(absl::Status st, const FieldError& e);
// A new error of `code`: message "<field><subscript> <detail>" (the core's wording: "top_p must be in ...").
absl::Status field_error(absl::StatusCode code, absl::string_view field, absl::string_view detail,
                         absl::string_view subscript = "");
// INVALID_ARGUMENT, as above.
absl::Status invalid_field(absl::string_view field, absl::string_view detail,
                           absl::string_view subscript = "");
// `st` as an error of `field` with st's message as the detail: message "<field>: <st's message>", code kept.
absl::Status prefix_field(const absl::Status& st, absl::string_view field);
// The field `st` carries; nullopt when none (or OK).
std::optional<FieldError> field_error_of(const absl::Status& st);

}  // namespace frost
