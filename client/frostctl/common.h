#pragma once
// What every frostctl command shares: the common flags (--addr, --timeout), the channel, the call deadline,
// and how errors are reported.
//
// Exit codes: 0 success; 1 usage error (bad flag or argument; usage text on stderr); 2 the RPC failed
// (`frostctl: <CODE_NAME>: <message>` on stderr); 3 `health` answered but not SERVING.
#include <google/protobuf/message.h>
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/frostctl/flags.h"

namespace frost::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitRpcError = 2;
inline constexpr int kExitNotServing = 3;

// Deadline of every command but `generate` (which has none) when --timeout is not given.
inline constexpr double kDefaultTimeoutS = 10;

struct CommonOptions {
  // frostd's gRPC address, HOST:PORT (any gRPC target string works, e.g. "unix:/path").
  std::string addr = "localhost:50051";
  // --timeout: the call's deadline in seconds from the start of the call; unset = the command's default.
  std::optional<double> timeout_s;
};

// The flags every command accepts: --addr HOST:PORT, --timeout SECONDS (> 0).
std::vector<Flag> common_flags(CommonOptions* options);

// An insecure channel to options.addr (frostd serves plaintext gRPC).
std::shared_ptr<grpc::Channel> make_channel(const CommonOptions& options);

// Sets ctx's deadline to now + (options.timeout_s, else default_timeout_s); no deadline when both are unset.
void apply_deadline(const CommonOptions& options, std::optional<double> default_timeout_s,
                    grpc::ClientContext* ctx);

// "INVALID_ARGUMENT" etc. for a gRPC status code (gRPC and absl share the canonical code numbers); "CODE_<n>"
// for a number outside the canonical range.
std::string status_code_name(grpc::StatusCode code);

// Prints `frostctl: <CODE_NAME>: <message>` to stderr; returns kExitRpcError.
int report_rpc_error(const grpc::Status& status);

// Prints `frostctl: <message>` and then `usage` to stderr; returns kExitUsage.
int report_usage_error(const absl::Status& status, const char* usage);
int report_usage_error(const std::string& message, const char* usage);

// Prints `message` to stdout as one line of JSON (proto field names, proto3 JSON mapping: 64-bit integers are
// strings, unset fields are left out) and flushes.
void print_json_line(const google::protobuf::Message& message);

// Reads all of stdin (for a PROMPT / TEXT argument of "-").
std::string read_stdin();

}  // namespace frost::ctl
