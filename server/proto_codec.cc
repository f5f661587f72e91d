#include "server/proto_codec.h"

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/utf8.h"

namespace frost::server {
namespace {

namespace pb = google::protobuf;

// Nested messages followed at most this deep. Our request schemas are 3 levels deep; the cap only bounds the
// work a hostile, deeply nested payload can cause (protobuf's own parser stops at 100).
constexpr int kMaxDepth = 16;

std::string find_in(std::string_view wire, const pb::Descriptor& type, const std::string& prefix, int depth,
                    size_t* offset, size_t* length) {
  if (depth > kMaxDepth) return "";
  pb::UnknownFieldSet fields;
  if (!fields.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) return "";
  std::map<int, int> seen;  // field number -> occurrences so far (the index of a repeated element)
  for (int i = 0; i < fields.field_count(); ++i) {
    const pb::UnknownField& f = fields.field(i);
    const int index = seen[f.number()]++;
    if (f.type() != pb::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const pb::FieldDescriptor* fd = type.FindFieldByNumber(f.number());
    if (fd == nullptr) continue;
    std::string path = absl::StrCat(prefix, fd->name());
    if (fd->is_repeated()) absl::StrAppend(&path, "[", index, "]");
    const std::string& value = f.length_delimited();
    if (fd->type() == pb::FieldDescriptor::TYPE_STRING) {
      if (const size_t bad = utf8_valid_prefix(value); bad < value.size()) {
        *offset = bad;
        *length = value.size();
        return path;
      }
    } else if (fd->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      std::string found = find_in(value, *fd->message_type(), path + ".", depth + 1, offset, length);
      if (!found.empty()) return found;
    }
  }
  return "";
}

void protobuf_log_to_frost(pb::LogLevel level, const char* filename, int line, const std::string& message) {
  // FATAL still aborts inside protobuf after the handler returns; make sure it is seen.
  if (level == pb::LOGLEVEL_FATAL) {
    FROST_LOG_ERROR("protobuf %s:%d: %s", filename, line, message.c_str());
  } else {
    FROST_LOG_DEBUG("protobuf %s:%d: %s", filename, line, message.c_str());
  }
}

}  // namespace

std::string find_invalid_utf8_field(std::string_view wire, const pb::Descriptor& type, size_t* offset,
                                    size_t* length) {
  *offset = *length = 0;
  return find_in(wire, type, "", 0, offset, length);
}

absl::Status parse_request(const grpc::ByteBuffer& bytes, pb::Message* out) {
  out->Clear();
  std::vector<grpc::Slice> slices;
  // No payload at all (gRPC's null buffer), as opposed to a zero-length message (all fields unset): gRPC
  // hands a raw method that when the call ended before its request message arrived. The client cancelled at
  // once (the server context may not say so yet), or broke the protocol by closing without one.
  if (!bytes.Valid()) {
    return absl::CancelledError(absl::StrCat("no ", out->GetDescriptor()->full_name(),
                                             " message arrived: the call was cancelled or closed before it"));
  }
  if (grpc::Status st = bytes.Dump(&slices); !st.ok()) {
    return absl::InternalError(absl::StrCat("cannot read the request bytes: ", st.error_message()));
  }
  std::string wire;
  wire.reserve(bytes.Length());
  for (const grpc::Slice& s : slices) wire.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (out->ParseFromString(wire)) return absl::OkStatus();
  out->Clear();

  size_t offset = 0, length = 0;
  const std::string field = find_invalid_utf8_field(wire, *out->GetDescriptor(), &offset, &length);
  if (!field.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not valid UTF-8 (invalid byte at offset ", offset, " of ", length, ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat("request: ", wire.size(), " bytes are not a valid ",
                                                 out->GetDescriptor()->full_name(), " message"));
}

absl::Status serialize_response(const pb::Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  out->Clear();  // the serializer writes into an empty buffer only
  grpc::Status st = grpc::SerializationTraits<pb::Message>::Serialize(message, out, &own_buffer);
  if (!st.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot serialize ", message.GetDescriptor()->full_name(), ": ", st.error_message()));
  }
  return absl::OkStatus();
}

void route_protobuf_logs() { pb::SetLogHandler(&protobuf_log_to_frost); }

}  // namespace frost::server
