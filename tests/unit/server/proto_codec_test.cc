// proto_codec: raw request bytes → message, with INVALID_ARGUMENT naming the field when protobuf refuses
// them.
#include "server/proto_codec.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

#include <string>

#include "frost/v1/generation.pb.h"

namespace frost::server {
namespace {

namespace pb = google::protobuf;

// Wire bytes of one length-delimited field (protobuf's own serializer refuses invalid UTF-8 in proto3
// strings, so bad requests are written by hand, as a client in another language could send them).
std::string ld_field(int number, const std::string& value) {
  std::string out;
  pb::io::StringOutputStream raw(&out);
  pb::io::CodedOutputStream coded(&raw);
  coded.WriteTag(static_cast<uint32_t>(number << 3 | 2));
  coded.WriteVarint32(static_cast<uint32_t>(value.size()));
  coded.WriteRaw(value.data(), static_cast<int>(value.size()));
  coded.Trim();
  return out;
}

grpc::ByteBuffer to_buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string serialized(const pb::Message& m) {
  std::string s;
  EXPECT_TRUE(m.SerializeToString(&s));
  return s;
}

TEST(ProtoCodecTest, ValidRequestRoundTrips) {
  v1::GenerateRequest req;
  req.set_text("Once upon a time — ünïcode");
  req.set_request_id("r1");
  req.mutable_sampling()->set_temperature(0.5f);
  req.mutable_sampling()->add_stop("\n");
  v1::GenerateRequest parsed;
  ASSERT_TRUE(parse_request(to_buffer(serialized(req)), &parsed).ok());
  EXPECT_EQ(parsed.SerializeAsString(), req.SerializeAsString());
}

TEST(ProtoCodecTest, InvalidUtf8InTopLevelStringNamesTheField) {
  // field 2 = text
  v1::GenerateRequest parsed;
  parsed.set_request_id("stale");
  const absl::Status st = parse_request(to_buffer(ld_field(2, "ab\xff\xfe")), &parsed);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "text: not valid UTF-8 (invalid byte at offset 2 of 4)");
  EXPECT_TRUE(parsed.request_id().empty()) << "a refused request must leave no partial message behind";
}

TEST(ProtoCodecTest, InvalidUtf8InNestedRepeatedStringNamesPathAndIndex) {
  // sampling (5) { stop (10): "ok", stop: "\xc3" (truncated 2-byte sequence) }
  const std::string sampling = ld_field(10, "ok") + ld_field(10, "x\xc3");
  const std::string wire = ld_field(2, "hello") + ld_field(5, sampling);
  v1::GenerateRequest parsed;
  const absl::Status st = parse_request(to_buffer(wire), &parsed);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "sampling.stop[1]: not valid UTF-8 (invalid byte at offset 1 of 2)");
}

TEST(ProtoCodecTest, OverlongAndSurrogateEncodingsAreInvalid) {
  size_t offset = 0, length = 0;
  // "/" as an overlong 2-byte sequence; U+D800 encoded in UTF-8 (a surrogate).
  for (const std::string& bad : {std::string("a\xc0\xaf"), std::string("a\xed\xa0\x80")}) {
    EXPECT_EQ(find_invalid_utf8_field(ld_field(1, bad), *v1::TokenizeRequest::descriptor(), &offset, &length),
              "text")
        << bad;
    EXPECT_EQ(offset, 1u);
  }
  EXPECT_EQ(find_invalid_utf8_field(ld_field(1, "h\xc3\xa9llo \xf0\x9f\x98\x80"),
                                    *v1::TokenizeRequest::descriptor(), &offset, &length),
            "");
}

TEST(ProtoCodecTest, MalformedWireFormatIsInvalidArgument) {
  // A length prefix running past the end of the buffer.
  std::string wire = ld_field(2, "hello");
  wire.resize(wire.size() - 2);
  v1::GenerateRequest parsed;
  const absl::Status st = parse_request(to_buffer(wire), &parsed);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("not a valid frost.v1.GenerateRequest"), std::string::npos) << st.message();
}

TEST(ProtoCodecTest, ZeroLengthMessageIsTheDefaultButNoMessageIsCancelled) {
  v1::TokenizeRequest parsed;
  parsed.set_text("stale");
  ASSERT_TRUE(parse_request(to_buffer(""), &parsed).ok());
  EXPECT_TRUE(parsed.text().empty());
  // gRPC's null buffer: the call ended before its request message arrived.
  const absl::Status st = parse_request(grpc::ByteBuffer(), &parsed);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(st.message(),
            "no frost.v1.TokenizeRequest message arrived: the call was cancelled or closed before it");
}

TEST(ProtoCodecTest, SerializeResponseParsesBack) {
  v1::GenerateResponse resp;
  resp.mutable_chunk()->add_token_ids(7);
  resp.mutable_chunk()->set_text("é");
  grpc::ByteBuffer bb;
  ASSERT_TRUE(serialize_response(resp, &bb).ok());
  v1::GenerateResponse back;
  ASSERT_TRUE(parse_request(bb, &back).ok());
  EXPECT_EQ(back.SerializeAsString(), resp.SerializeAsString());
}

}  // namespace
}  // namespace frost::server
