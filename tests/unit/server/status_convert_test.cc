#include "server/status_convert.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace frost::server {
namespace {

// Every canonical code, paired by name (the numbers are not what we test).
std::vector<std::pair<absl::StatusCode, grpc::StatusCode>> all_codes() {
  return {
      {absl::StatusCode::kOk, grpc::StatusCode::OK},
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
      {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
}

TEST(StatusConvertTest, CoversAllSeventeenCanonicalCodes) {
  EXPECT_EQ(all_codes().size(), 17u);
}

TEST(StatusConvertTest, AbslToGrpcKeepsCodeAndMessage) {
  for (const auto& [absl_code, grpc_code] : all_codes()) {
    if (absl_code == absl::StatusCode::kOk) continue;
    const std::string msg = "top_p must be in (0, 1], got 1.5 / " +
                            absl::StatusCodeToString(absl_code);
    const grpc::Status g = to_grpc_status(absl::Status(absl_code, msg));
    EXPECT_EQ(g.error_code(), grpc_code) << absl::StatusCodeToString(absl_code);
    EXPECT_EQ(g.error_message(), msg);
  }
}

TEST(StatusConvertTest, GrpcToAbslKeepsCodeAndMessage) {
  for (const auto& [absl_code, grpc_code] : all_codes()) {
    if (grpc_code == grpc::StatusCode::OK) continue;
    const std::string msg = "queue full: " + std::to_string(static_cast<int>(grpc_code));
    const absl::Status a = to_absl_status(grpc::Status(grpc_code, msg));
    EXPECT_EQ(a.code(), absl_code) << msg;
    EXPECT_EQ(a.message(), msg);
  }
}

TEST(StatusConvertTest, RoundTripsEveryCode) {
  for (const auto& [absl_code, grpc_code] : all_codes()) {
    const absl::Status original = absl_code == absl::StatusCode::kOk
                                      ? absl::OkStatus()
                                      : absl::Status(absl_code, "m\xC3\xA9ssage");
    EXPECT_EQ(to_absl_status(to_grpc_status(original)), original);
    const grpc::Status g = absl_code == absl::StatusCode::kOk ? grpc::Status::OK
                                                              : grpc::Status(grpc_code, "msg");
    const grpc::Status back = to_grpc_status(to_absl_status(g));
    EXPECT_EQ(back.error_code(), g.error_code());
    EXPECT_EQ(back.error_message(), g.error_message());
  }
}

TEST(StatusConvertTest, OkIsOkBothWays) {
  EXPECT_TRUE(to_grpc_status(absl::OkStatus()).ok());
  EXPECT_TRUE(to_absl_status(grpc::Status::OK).ok());
  EXPECT_TRUE(to_absl_status(grpc::Status()).ok());
}

TEST(StatusConvertTest, EmptyMessageStaysEmpty) {
  const grpc::Status g = to_grpc_status(absl::Status(absl::StatusCode::kInternal, ""));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(g.error_message(), "");
}

TEST(StatusConvertTest, NonCanonicalGrpcCodeBecomesUnknownNamingTheNumber) {
  const absl::Status a = to_absl_status(grpc::Status(static_cast<grpc::StatusCode>(42), "odd"));
  EXPECT_EQ(a.code(), absl::StatusCode::kUnknown);
  EXPECT_NE(std::string(a.message()).find("odd"), std::string::npos) << a;
  EXPECT_NE(std::string(a.message()).find("42"), std::string::npos) << a;
}

}  // namespace
}  // namespace frost::server
