#pragma once
// absl::Status <-> grpc::Status. This pair of functions is the only place in frost that maps
// status codes (docs/conventions.md, "Errors"); services call them at the RPC boundary.
#include "absl/status/status.h"
#include <grpcpp/support/status.h>

namespace frost::server {

// Same code, same message. absl payloads and grpc error details are not carried. A code
// with no gRPC equivalent (absl's reserved value) becomes UNKNOWN with the number appended.
grpc::Status to_grpc_status(const absl::Status& status);

// Same code, same message. A code outside gRPC's canonical range becomes UNKNOWN with the
// original number appended to the message.
absl::Status to_absl_status(const grpc::Status& status);

}  // namespace frost::server
