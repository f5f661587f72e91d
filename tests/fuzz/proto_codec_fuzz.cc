// Fuzz target: the raw request codec of Generate / Tokenize (server/proto_codec.h) on arbitrary wire bytes.
//
// Input: byte 0 picks the message (bit 0: GenerateRequest / TokenizeRequest) and byte 1 where the bytes
// are cut into two gRPC slices (parse_request must join them); the rest is the request as a client sent
// it. Promises checked:
//   - a rejection is INVALID_ARGUMENT; when it names a field, the offset lies inside the field's value;
//   - a message protobuf accepts has no string field that find_invalid_utf8_field() flags;
//   - an accepted message survives serialize_response() → parse_request() unchanged.
#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frost/v1/generation.pb.h"
#include "server/proto_codec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

grpc::ByteBuffer to_buffer(const std::string& wire, size_t cut) {
  std::vector<grpc::Slice> slices;
  if (cut > 0 && cut < wire.size()) {
    slices.emplace_back(wire.data(), cut);
    slices.emplace_back(wire.data() + cut, wire.size() - cut);
  } else {
    slices.emplace_back(wire.data(), wire.size());
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  frost::server::route_protobuf_logs();  // as frostd: protobuf's parse errors go to the (quiet) frost log
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  if (size < 2) return 0;
  std::unique_ptr<google::protobuf::Message> msg;
  if (data[0] & 1) {
    msg = std::make_unique<v1::TokenizeRequest>();
  } else {
    msg = std::make_unique<v1::GenerateRequest>();
  }
  const std::string wire(reinterpret_cast<const char*>(data + 2), size - 2);
  const size_t cut = data[1] % (wire.size() + 1);

  size_t offset = 0, length = 0;
  const std::string field = server::find_invalid_utf8_field(wire, *msg->GetDescriptor(), &offset, &length);
  if (!field.empty()) FROST_FUZZ_CHECK(offset < length, "offset outside the flagged field " + field);

  const absl::Status st = server::parse_request(to_buffer(wire, cut), msg.get());
  if (!st.ok()) {
    FROST_FUZZ_CHECK(st.code() == absl::StatusCode::kInvalidArgument, st.ToString());
    return 0;
  }
  FROST_FUZZ_CHECK(field.empty(), "protobuf accepted a message whose field " + field + " is flagged as bad UTF-8");

  grpc::ByteBuffer out;
  const absl::Status ser = server::serialize_response(*msg, &out);
  FROST_FUZZ_CHECK(ser.ok(), ser.ToString());
  std::unique_ptr<google::protobuf::Message> back(msg->New());
  const absl::Status st2 = server::parse_request(out, back.get());
  FROST_FUZZ_CHECK(st2.ok(), "a serialized request does not parse: " + st2.ToString());
  FROST_FUZZ_CHECK(back->SerializeAsString() == msg->SerializeAsString(), "request changed in a round trip");
  return 0;
}
