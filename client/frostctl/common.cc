// Shared frostctl plumbing: common flags, channel, deadlines, error reporting (see common.h).
#include "client/frostctl/common.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace frost::ctl {

std::vector<Flag> common_flags(CommonOptions* options) {
  return {
      string_flag("--addr", [options](const std::string& v) { options->addr = v; }),
      Flag{"--timeout", true,
           [options](const std::string& v) {
             absl::StatusOr<double> t = parse_double("--timeout", v);
             if (!t.ok()) return t.status();
             if (*t <= 0) return absl::InvalidArgumentError(absl::StrCat("--timeout: must be > 0, got ", v));
             options->timeout_s = *t;
             return absl::OkStatus();
           }},
  };
}

std::shared_ptr<grpc::Channel> make_channel(const CommonOptions& options) {
  return grpc::CreateChannel(options.addr, grpc::InsecureChannelCredentials());
}

void apply_deadline(const CommonOptions& options, std::optional<double> default_timeout_s,
                    grpc::ClientContext* ctx) {
  const std::optional<double> timeout_s = options.timeout_s ? options.timeout_s : default_timeout_s;
  if (!timeout_s) return;
  const auto timeout = std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::duration<double>(*timeout_s));
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
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

int report_usage_error(const std::string& message, const char* usage) {
  std::fprintf(stderr, "frostctl: %s\n%s", message.c_str(), usage);
  return kExitUsage;
}

int report_usage_error(const absl::Status& status, const char* usage) {
  return report_usage_error(std::string(status.message()), usage);
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

}  // namespace frost::ctl
