// Shared frostctl plumbing: common flags, channel, deadlines, error reporting (see common.h).
#include "client/frostctl/common.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/frostctl/format.h"

namespace frost::ctl {

std::vector<Flag> common_flags(CommonOptions* options, const std::string& timeout_default) {
  return {
      string_flag("--addr", [options](const std::string& v) { options->addr = v; })
          .doc("HOST:PORT", "frostd's gRPC address (default localhost:50051)"),
      value_flag("--timeout",
                 [options](const std::string& v) {
                   absl::StatusOr<double> t = parse_double("--timeout", v);
                   if (!t.ok()) return t.status();
                   if (*t <= 0)
                     return absl::InvalidArgumentError(absl::StrCat("--timeout: must be > 0, got ", v));
                   options->timeout_s = *t;
                   return absl::OkStatus();
                 })
          .doc("SECONDS", absl::StrCat("call deadline (default: ", timeout_default, ")")),
      string_flag("--token-file", [options](const std::string& v) { options->token_file = v; })
          .doc("PATH",
               absl::StrCat("bearer token sent as \"authorization: Bearer <token>\" (default: $",
                            kTokenEnvVar, "; train, jobs, artifacts and server-info need an admin token)")),
      switch_flag("--tls", [options] { options->tls = true; })
          .doc("connect over TLS (implied by --ca, --cert and --server-name)"),
      string_flag("--ca", [options](const std::string& v) { options->ca_file = v; })
          .doc("FILE", "PEM roots that verify the server (default: the system's)"),
      string_flag("--cert", [options](const std::string& v) { options->cert_file = v; })
          .doc("FILE", "this client's certificate, for servers that require one (mTLS; with --key)"),
      string_flag("--key", [options](const std::string& v) { options->key_file = v; })
          .doc("FILE", "the private key of --cert"),
      string_flag("--server-name", [options](const std::string& v) { options->server_name = v; })
          .doc("NAME", "name to check in the server's certificate (default: the --addr host)"),
  };
}

cli::Command make_command(const std::string& name, const std::string& synopsis,
                          const std::string& description, std::vector<Flag> own, CommonOptions* common,
                          const std::string& timeout_default, const std::string& footer) {
  cli::Command c;
  c.name = absl::StrCat("frostctl ", name);
  c.synopsis = synopsis;
  c.description = description;
  c.flag_groups = {{"flags", std::move(own)}, {"common flags", common_flags(common, timeout_default)}};
  c.footer = footer;
  return c;
}

std::optional<std::vector<std::string>> parse_args(const cli::Command& command,
                                                   const std::vector<std::string>& args, int* exit_code) {
  absl::StatusOr<cli::ParsedArgs> parsed = cli::parse_command(command, args);
  if (!parsed.ok()) {
    *exit_code = report_usage_error(parsed.status(), command);
    return std::nullopt;
  }
  if (parsed->help) {
    cli::print_help(command);
    *exit_code = kExitOk;
    return std::nullopt;
  }
  return std::move(parsed->positional);
}

namespace {

absl::Status read_pem_flag(const char* flag, const std::optional<std::string>& path, std::string* out) {
  constexpr size_t kMaxPemBytes = 1 << 20;
  if (!path) return absl::OkStatus();
  absl::StatusOr<std::string> content = read_file(*path, kMaxPemBytes);
  if (!content.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", content.status().message()));
  if (content->find("-----BEGIN ") == std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", *path, "\" is not a PEM file"));
  *out = *std::move(content);
  return absl::OkStatus();
}

absl::Status resolve_tls(CommonOptions* options) {
  if (options->cert_file.has_value() != options->key_file.has_value())
    return absl::InvalidArgumentError("--cert and --key go together (the client certificate and its key)");
  if (options->ca_file || options->cert_file || options->server_name) options->tls = true;
  if (absl::Status s = read_pem_flag("--ca", options->ca_file, &options->ca_pem); !s.ok()) return s;
  if (absl::Status s = read_pem_flag("--cert", options->cert_file, &options->cert_pem); !s.ok()) return s;
  return read_pem_flag("--key", options->key_file, &options->key_pem);
}

}  // namespace

absl::Status resolve_credentials(CommonOptions* options) {
  if (absl::Status s = resolve_tls(options); !s.ok()) return s;
  // A token is a few hundred bytes; the cap only stops a wrong path (a log, /dev/zero) from being read whole.
  constexpr size_t kMaxTokenFileBytes = 64 << 10;
  std::string token;
  std::string source;
  if (options->token_file) {
    source = absl::StrCat("--token-file \"", *options->token_file, "\"");
    absl::StatusOr<std::string> content = read_file(*options->token_file, kMaxTokenFileBytes);
    if (!content.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", content.status().message()));
    }
    token = trim_trailing_whitespace(*content);
  } else {
    const char* env = std::getenv(kTokenEnvVar);
    if (env == nullptr || *env == '\0') {
      options->token.reset();
      return absl::OkStatus();
    }
    source = absl::StrCat("$", kTokenEnvVar);
    token = trim_trailing_whitespace(env);
  }
  if (absl::Status s = check_bearer_token(token); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  options->token = std::move(token);
  return absl::OkStatus();
}

std::optional<Subcommand> parse_subcommand(const std::vector<std::string>& args, const cli::Command& group,
                                           int* exit_code) {
  absl::StatusOr<cli::ParsedArgs> parsed = cli::parse_command(group, args, /*stop_at_positional=*/true);
  if (!parsed.ok()) {
    *exit_code = report_usage_error(parsed.status(), group);
    return std::nullopt;
  }
  if (parsed->help) {
    cli::print_help(group);
    *exit_code = kExitOk;
    return std::nullopt;
  }
  const std::vector<std::string>& rest = parsed->positional;
  if (rest.empty()) {
    *exit_code = report_usage_error(
        absl::StrCat(group.name.substr(sizeof("frostctl")), ": no subcommand given"), group);
    return std::nullopt;
  }
  return Subcommand{rest.front(), std::vector<std::string>(rest.begin() + 1, rest.end())};
}

std::shared_ptr<grpc::Channel> make_channel(const CommonOptions& options) {
  if (!options.tls) return grpc::CreateChannel(options.addr, grpc::InsecureChannelCredentials());
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.ca_pem;  // "" = gRPC's default roots
  ssl.pem_cert_chain = options.cert_pem;
  ssl.pem_private_key = options.key_pem;
  grpc::ChannelArguments args;
  if (options.server_name) args.SetSslTargetNameOverride(*options.server_name);
  return grpc::CreateCustomChannel(options.addr, grpc::SslCredentials(ssl), args);
}

void apply_deadline(const CommonOptions& options, std::optional<double> default_timeout_s,
                    grpc::ClientContext* ctx) {
  const std::optional<double> timeout_s = options.timeout_s ? options.timeout_s : default_timeout_s;
  if (!timeout_s) return;
  const auto timeout = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(*timeout_s));
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

void prepare_context(const CommonOptions& options, std::optional<double> default_timeout_s,
                     grpc::ClientContext* ctx) {
  apply_deadline(options, default_timeout_s, ctx);
  if (options.token) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", *options.token));
}

std::string status_code_name(grpc::StatusCode code) {
  const int n = static_cast<int>(code);
  // absl::StatusCode uses the same numbers as grpc::StatusCode (google.rpc.Code) for 0..16.
  if (n < 0 || n > 16) return absl::StrCat("CODE_", n);
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(n));
}

int report_rpc_error(const grpc::Status& status) {
  std::fflush(stdout);
  std::fprintf(stderr, "frostctl: %s: %s\n", status_code_name(status.error_code()).c_str(),
               status.error_message().c_str());
  return kExitRpcError;
}

int report_usage_error(const std::string& message, const cli::Command& command) {
  std::fflush(stdout);
  std::fprintf(stderr, "frostctl: %s\n\n%s", message.c_str(), cli::format_help(command).c_str());
  return kExitUsage;
}

int report_usage_error(const absl::Status& status, const cli::Command& command) {
  return report_usage_error(std::string(status.message()), command);
}

int report_input_error(const absl::Status& status) {
  std::fflush(stdout);
  std::fprintf(stderr, "frostctl: %s\n", std::string(status.message()).c_str());
  return kExitUsage;
}

void print_json_line(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string line;
  // Printing a message we just parsed cannot fail; a failure would be a protobuf bug.
  if (!google::protobuf::util::MessageToJsonString(message, &line, options).ok()) line = "{}";
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

absl::StatusOr<std::string> read_file(const std::string& path, size_t max_bytes) {
  const bool is_stdin = path == "-";
  const int fd = is_stdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  auto cannot_read = [&path](int err) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read \"", path, "\": ", std::strerror(err)));
  };
  if (fd < 0) return cannot_read(errno);
  std::string content;
  char buf[1 << 16];
  absl::Status status;
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = cannot_read(errno);  // e.g. EISDIR for a directory
      break;
    }
    if (n == 0) break;
    if (content.size() + static_cast<size_t>(n) > max_bytes) {
      status =
          absl::InvalidArgumentError(absl::StrCat("\"", path, "\" is larger than ", max_bytes, " bytes"));
      break;
    }
    content.append(buf, static_cast<size_t>(n));
  }
  if (!is_stdin) ::close(fd);
  if (!status.ok()) return status;
  return content;
}

}  // namespace frost::ctl
