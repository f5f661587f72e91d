#pragma once
// Request parsing and response serialization for the raw (ByteBuffer) gRPC methods.
//
// Why raw methods: a proto3 `string` field must hold valid UTF-8, and protobuf's parser refuses a message
// whose string does not. With typed callback methods that refusal happens inside gRPC, before any frost
// code runs, and gRPC 1.51 answers UNIMPLEMENTED with an empty message (other versions: INTERNAL) — a client
// that sent one bad byte is told the method does not exist. Generate and Tokenize therefore take the request
// bytes and parse them here, so a bad request gets INVALID_ARGUMENT naming the field, like every other
// validation error ("text: not valid UTF-8 ...", "sampling.stop[1]: not valid UTF-8 ...").
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace frost::server {

// Parses `bytes` into `out` (cleared first). INVALID_ARGUMENT when they are not a valid `out` message: the
// message names the first string field holding invalid UTF-8 (its path, e.g. "sampling.stop[1]") when that
// is the reason, else says the bytes are not a valid <type>. CANCELLED for a null buffer (the call ended
// before its request message arrived); a zero-length buffer is the default message.
absl::Status parse_request(const grpc::ByteBuffer& bytes, google::protobuf::Message* out);

// Serializes `message` into `out` (replacing its contents). INTERNAL when it cannot be serialized.
absl::Status serialize_response(const google::protobuf::Message& message, grpc::ByteBuffer* out);

// The path of the first `string` field of `type` (searched depth-first through nested message fields, in
// wire order) whose value in the serialized message `wire` is not valid UTF-8, with its byte offset in
// *offset and its length in *length; empty when there is none or `wire` is not parseable wire format.
// Repeated fields are indexed: "stop[1]". Exposed for tests.
std::string find_invalid_utf8_field(std::string_view wire, const google::protobuf::Descriptor& type,
                                    size_t* offset, size_t* length);

// Routes protobuf's own log messages (it logs an ERROR for every message it refuses to parse) into frost's
// log at debug level: a client sending bad bytes must not be able to flood the server log, and the request
// outcome is already counted in frost_requests_total{code="INVALID_ARGUMENT"}. Call once from main().
void route_protobuf_logs();

}  // namespace frost::server
