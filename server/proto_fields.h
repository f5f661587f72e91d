#pragma once
// A proto message read into a struct through the struct's ConfigTable (core/common/config_fields.h): each
// table row is the proto field of the same name, read through protobuf reflection, so a new row needs no
// transport code (docs/architecture.md, "Worked example: adding a config field, a flag or a request field").
// It lives in server/ because the core does not depend on the protos; the table stays the core's.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"
#include "core/common/number_text.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace frost::server {

// Whether a proto scalar of `type` can carry a row of `kind`: a float or double a number, any integer an
// integer (the row's own range refuses what its member cannot hold), a bool a bool, a string a string, an
// enum name or a custom spec. A repeated field or a message carries no row.
inline bool proto_carries(const google::protobuf::FieldDescriptor& fd, FieldKind kind) {
  using FD = google::protobuf::FieldDescriptor;
  if (fd.is_repeated()) return false;
  switch (fd.cpp_type()) {
    case FD::CPPTYPE_FLOAT:
    case FD::CPPTYPE_DOUBLE:
      return kind == FieldKind::kNumber;
    case FD::CPPTYPE_INT32:
    case FD::CPPTYPE_INT64:
    case FD::CPPTYPE_UINT32:
    case FD::CPPTYPE_UINT64:
      return kind == FieldKind::kInt;
    case FD::CPPTYPE_BOOL:
      return kind == FieldKind::kBool;
    case FD::CPPTYPE_STRING:
      return kind == FieldKind::kString || kind == FieldKind::kEnum || kind == FieldKind::kCustom;
    default:
      return false;
  }
}

// The value of `fd` in `msg` as a FieldInput for a row: numbers by their exact text, typed (a number row
// refuses a string and the other way round). A float is written as the shortest text that reads back as the
// same float (the row parses it as a double and narrows it to the member's float: the same bits), so a
// message shows "got 1.5", not the double the float widens to.
inline FieldInput proto_field_input(const google::protobuf::Message& msg,
                                    const google::protobuf::FieldDescriptor& fd) {
  using FD = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection& r = *msg.GetReflection();
  std::string text;
  switch (fd.cpp_type()) {
    case FD::CPPTYPE_FLOAT:
      text = shortest_float_text(r.GetFloat(msg, &fd));
      break;
    case FD::CPPTYPE_DOUBLE:
      text = shortest_number_text(r.GetDouble(msg, &fd));
      break;
    case FD::CPPTYPE_INT32:
      text = std::to_string(r.GetInt32(msg, &fd));
      break;
    case FD::CPPTYPE_INT64:
      text = std::to_string(r.GetInt64(msg, &fd));
      break;
    case FD::CPPTYPE_UINT32:
      text = std::to_string(r.GetUInt32(msg, &fd));
      break;
    case FD::CPPTYPE_UINT64:
      text = std::to_string(r.GetUInt64(msg, &fd));
      break;
    case FD::CPPTYPE_BOOL:
      text = r.GetBool(msg, &fd) ? "true" : "false";
      break;
    case FD::CPPTYPE_STRING:
      return FieldInput::of(r.GetString(msg, &fd), FieldInput::Form::kString);
    default:
      return FieldInput::of("", FieldInput::Form::kOther);
  }
  FieldInput in = FieldInput::of(text, FieldInput::Form::kNumber);
  in.shown = text;  // a number as it is: "got nan", not "got \"nan\""
  return in;
}

// Reads the set fields of `msg` into `c`: every row of `table` not named in `by_hand` is the proto field of
// the same name; a field the message does not set (proto3 `optional`, HasField) keeps c's value. A refused
// value is INVALID_ARGUMENT "<prefix><row>: <why>" ("sampling.top_p: must be in (0, 1], got 1.5"). A row
// without a proto field of its name, or of a type that cannot carry it, is INTERNAL: the mapping test
// (tests/unit/server/generation_request_test.cc) keeps that from shipping.
template <typename C>
absl::Status read_proto_fields(const google::protobuf::Message& msg, const ConfigTable<C>& table,
                               const std::vector<std::string>& by_hand, const std::string& prefix, C* c) {
  const google::protobuf::Descriptor& d = *msg.GetDescriptor();
  for (const ConfigField<C>& row : table.fields()) {
    if (std::find(by_hand.begin(), by_hand.end(), row.name) != by_hand.end()) continue;
    const google::protobuf::FieldDescriptor* fd = d.FindFieldByName(row.name);
    if (fd == nullptr || !proto_carries(*fd, row.kind))
      return absl::InternalError(absl::StrCat(d.full_name(), " has no field '", row.name, "' to carry it"));
    if (!msg.GetReflection()->HasField(msg, fd)) continue;
    const FieldInput in = proto_field_input(msg, *fd);
    if (absl::Status s = table.apply_as(*c, row.name, in, prefix + row.name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace frost::server
