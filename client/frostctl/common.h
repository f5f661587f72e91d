#pragma once
// What every frostctl command shares: the common flags (--addr, --timeout, --token-file), the channel, the
// call deadline and bearer token, and how errors are reported.
//
// Exit codes: 0 success; 1 usage error (bad flag or argument: usage text on stderr; or an input file
// that cannot be read or parsed, e.g. --token-file or --inline-jsonl: the message names it); 2 the RPC
// failed (`frostctl: <CODE_NAME>: <message>` on stderr); 3 `health` answered but not SERVING; 4 a watched
// training job ended FAILED, CANCELLED or INTERRUPTED (the reason on stderr).
#include <google/protobuf/message.h>
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/frostctl/flags.h"

namespace frost::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitRpcError = 2;
inline constexpr int kExitNotServing = 3;
inline constexpr int kExitJobFailed = 4;

// Deadline of every command but `generate` (which has none) when --timeout is not given.
inline constexpr double kDefaultTimeoutS = 10;

struct CommonOptions {
  // frostd's gRPC address, HOST:PORT (any gRPC target string works, e.g. "unix:/path").
  std::string addr = "localhost:50051";
  // --timeout: the call's deadline in seconds from the start of the call; unset = the command's default.
  std::optional<double> timeout_s;
  // --token-file: a file holding the bearer token (read by resolve_token).
  std::optional<std::string> token_file;
  // The bearer token sent as "authorization: Bearer <token>" with every call; set by resolve_token from
  // token_file, else from $FROST_TOKEN. Never printed.
  std::optional<std::string> token;
  // --tls: connect over TLS; --ca: PEM roots that verify the server (default: the system's); --cert/--key:
  // this client's certificate and key (mTLS); --server-name: the name checked in the server's certificate
  // (default: the host of --addr). The PEM contents are read by resolve_credentials.
  bool tls = false;
  std::optional<std::string> ca_file, cert_file, key_file, server_name;
  std::string ca_pem, cert_pem, key_pem;
};

// Environment variable holding the bearer token when --token-file is not given.
inline constexpr char kTokenEnvVar[] = "FROST_TOKEN";

// The flags every command accepts: --addr HOST:PORT, --timeout SECONDS (> 0), --token-file PATH, --tls, --ca
// FILE,
// --cert FILE, --key FILE, --server-name NAME. `timeout_default` is what --help says the command's deadline
// is without --timeout ("10", "none", ...).
std::vector<Flag> common_flags(CommonOptions* options, const std::string& timeout_default = "10");

// A command's flag table (core/flags/flags.h): its own flags under "flags", then the common flags under
// "common flags"; `name` is what follows "frostctl" ("jobs list"). --help and usage errors print it.
cli::Command make_command(const std::string& name, const std::string& synopsis,
                          const std::string& description, std::vector<Flag> own, CommonOptions* common,
                          const std::string& timeout_default, const std::string& footer = "");

// Parses a command's arguments with its table. nullopt when the command should not run, with *exit_code
// set: kExitOk after printing the help for -h / --help, or a usage error reported (kExitUsage).
std::optional<std::vector<std::string>> parse_args(const cli::Command& command,
                                                   const std::vector<std::string>& args, int* exit_code);

// Reads the --ca / --cert / --key files (INVALID_ARGUMENT naming the flag and file when one cannot be read,
// or
// --cert without --key; any of them implies --tls), then sets options->token, once the command's flags are
// parsed: the content of options->token_file when given (trailing whitespace and newline trimmed), else
// $FROST_TOKEN (trimmed the same way; unset or empty = no token). INVALID_ARGUMENT when the file cannot be
// read, or the token is empty or not visible ASCII; the message names the file or the variable, never the
// token.
absl::Status resolve_credentials(CommonOptions* options);

// A command group's subcommand (`jobs list ...`) and the arguments after its name.
struct Subcommand {
  std::string name;
  std::vector<std::string> args;
};

// Parses the common flags and -h / --help that precede a command group's subcommand name (`frostctl jobs
// --addr X list`) with `group` (a table of the common flags listing the subcommands). nullopt when there is
// nothing to dispatch, with *exit_code set: the group's help printed to stdout for --help, or a usage error
// reported (a bad flag, or no subcommand: "<group>: no subcommand given").
std::optional<Subcommand> parse_subcommand(const std::vector<std::string>& args, const cli::Command& group,
                                           int* exit_code);

// An insecure channel to options.addr (frostd serves plaintext gRPC).
std::shared_ptr<grpc::Channel> make_channel(const CommonOptions& options);

// Sets ctx's deadline to now + (options.timeout_s, else default_timeout_s); no deadline when both are unset.
void apply_deadline(const CommonOptions& options, std::optional<double> default_timeout_s,
                    grpc::ClientContext* ctx);

// apply_deadline, then the "authorization: Bearer <token>" metadata when options.token is set: every call's
// context goes through this.
void prepare_context(const CommonOptions& options, std::optional<double> default_timeout_s,
                     grpc::ClientContext* ctx);

// "INVALID_ARGUMENT" etc. for a gRPC status code (gRPC and absl share the canonical code numbers); "CODE_<n>"
// for a number outside the canonical range.
std::string status_code_name(grpc::StatusCode code);

// Prints `frostctl: <CODE_NAME>: <message>` to stderr; returns kExitRpcError.
int report_rpc_error(const grpc::Status& status);

// Prints `frostctl: <message>` and then the command's help to stderr; returns kExitUsage.
int report_usage_error(const absl::Status& status, const cli::Command& command);
int report_usage_error(const std::string& message, const cli::Command& command);

// Prints `frostctl: <message>` to stderr (no usage text: for an input file that cannot be read or parsed);
// returns kExitUsage.
int report_input_error(const absl::Status& status);

// Prints `message` to stdout as one line of JSON (proto field names, proto3 JSON mapping: 64-bit integers are
// strings, unset fields are left out) and flushes.
void print_json_line(const google::protobuf::Message& message);

// Reads all of stdin (for a PROMPT / TEXT argument of "-").
std::string read_stdin();

// Reads the file at `path` ("-": stdin), at most max_bytes bytes. INVALID_ARGUMENT `cannot read "<path>":
// <reason>` when it cannot be opened or read, or `"<path>" is larger than <max_bytes> bytes`.
absl::StatusOr<std::string> read_file(const std::string& path, size_t max_bytes);

}  // namespace frost::ctl
