#include "server/status_convert.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace frost::server {
namespace {

// Both enums follow google.rpc.Code, but we map by name, never by number, so a mismatch
// would be a compile error rather than a silent wrong code.
grpc::StatusCode to_grpc_code(absl::StatusCode code, bool* known) {
  *known = true;
  switch (code) {
    case absl::StatusCode::kOk: return grpc::StatusCode::OK;
    case absl::StatusCode::kCancelled: return grpc::StatusCode::CANCELLED;
    case absl::StatusCode::kUnknown: return grpc::StatusCode::UNKNOWN;
    case absl::StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case absl::StatusCode::kDeadlineExceeded: return grpc::StatusCode::DEADLINE_EXCEEDED;
    case absl::StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case absl::StatusCode::kAlreadyExists: return grpc::StatusCode::ALREADY_EXISTS;
    case absl::StatusCode::kPermissionDenied: return grpc::StatusCode::PERMISSION_DENIED;
    case absl::StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case absl::StatusCode::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case absl::StatusCode::kAborted: return grpc::StatusCode::ABORTED;
    case absl::StatusCode::kOutOfRange: return grpc::StatusCode::OUT_OF_RANGE;
    case absl::StatusCode::kUnimplemented: return grpc::StatusCode::UNIMPLEMENTED;
    case absl::StatusCode::kInternal: return grpc::StatusCode::INTERNAL;
    case absl::StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case absl::StatusCode::kDataLoss: return grpc::StatusCode::DATA_LOSS;
    case absl::StatusCode::kUnauthenticated: return grpc::StatusCode::UNAUTHENTICATED;
    // absl reserves this value so callers must keep a default; it is never produced.
    case absl::StatusCode::kDoNotUseReservedForFutureExpansionUseDefaultInSwitchInstead_:
      break;
  }
  *known = false;
  return grpc::StatusCode::UNKNOWN;
}

absl::StatusCode to_absl_code(grpc::StatusCode code, bool* known) {
  *known = true;
  switch (code) {
    case grpc::StatusCode::OK: return absl::StatusCode::kOk;
    case grpc::StatusCode::CANCELLED: return absl::StatusCode::kCancelled;
    case grpc::StatusCode::UNKNOWN: return absl::StatusCode::kUnknown;
    case grpc::StatusCode::INVALID_ARGUMENT: return absl::StatusCode::kInvalidArgument;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return absl::StatusCode::kDeadlineExceeded;
    case grpc::StatusCode::NOT_FOUND: return absl::StatusCode::kNotFound;
    case grpc::StatusCode::ALREADY_EXISTS: return absl::StatusCode::kAlreadyExists;
    case grpc::StatusCode::PERMISSION_DENIED: return absl::StatusCode::kPermissionDenied;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return absl::StatusCode::kResourceExhausted;
    case grpc::StatusCode::FAILED_PRECONDITION: return absl::StatusCode::kFailedPrecondition;
    case grpc::StatusCode::ABORTED: return absl::StatusCode::kAborted;
    case grpc::StatusCode::OUT_OF_RANGE: return absl::StatusCode::kOutOfRange;
    case grpc::StatusCode::UNIMPLEMENTED: return absl::StatusCode::kUnimplemented;
    case grpc::StatusCode::INTERNAL: return absl::StatusCode::kInternal;
    case grpc::StatusCode::UNAVAILABLE: return absl::StatusCode::kUnavailable;
    case grpc::StatusCode::DATA_LOSS: return absl::StatusCode::kDataLoss;
    case grpc::StatusCode::UNAUTHENTICATED: return absl::StatusCode::kUnauthenticated;
    // gRPC's sentinel, never a real status.
    case grpc::StatusCode::DO_NOT_USE: break;
  }
  *known = false;
  return absl::StatusCode::kUnknown;
}

}  // namespace

grpc::Status to_grpc_status(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  bool known = false;
  const grpc::StatusCode code = to_grpc_code(status.code(), &known);
  if (!known) {
    return grpc::Status(code, absl::StrCat(status.message(), " (status code ",
                                           static_cast<int>(status.code()), ")"));
  }
  return grpc::Status(code, std::string(status.message()));
}

absl::Status to_absl_status(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  bool known = false;
  const absl::StatusCode code = to_absl_code(status.error_code(), &known);
  if (!known) {
    return absl::Status(code, absl::StrCat(status.error_message(), " (grpc status code ",
                                           static_cast<int>(status.error_code()), ")"));
  }
  return absl::Status(code, status.error_message());
}

}  // namespace frost::server
