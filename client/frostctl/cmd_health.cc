// frostctl health: grpc.health.v1.Health/Check. Prints the status name (SERVING, NOT_SERVING, ...) and exits
// 0 only for SERVING, so it works as a readiness probe (`frostctl health --service frost.v1.Generation &&
// ...`).
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace frost::ctl {

const char kHealthUsage[] =
    "usage: frostctl health [flags]\n"
    "  --service NAME            e.g. frost.v1.Generation (default \"\": the "
    "whole server)\n"
    "  --addr HOST:PORT  --timeout SECONDS (default 10)  --token-file PATH\n"
    "Exit 0 when SERVING, 3 for any other status, 2 when the check fails (e.g. "
    "NOT_FOUND\n"
    "for a service the server does not know, UNAVAILABLE when nothing "
    "listens).\n";

int run_health(const std::vector<std::string>& args, CommonOptions common) {
  using grpc::health::v1::HealthCheckResponse;
  if (wants_help(args)) {
    std::fputs(kHealthUsage, stdout);
    return kExitOk;
  }
  grpc::health::v1::HealthCheckRequest request;
  std::vector<Flag> flags = common_flags(&common);
  flags.push_back(string_flag("--service", [&request](const std::string& v) { request.set_service(v); }));
  absl::StatusOr<std::vector<std::string>> positional = parse_flags(args, flags);
  if (!positional.ok()) return report_usage_error(positional.status(), kHealthUsage);
  if (!positional->empty()) {
    return report_usage_error(absl::StrCat("health: unexpected argument \"", positional->front(), "\""),
                              kHealthUsage);
  }

  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<grpc::health::v1::Health::Stub> stub =
      grpc::health::v1::Health::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, kDefaultTimeoutS, &ctx);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&ctx, request, &response);
  if (!status.ok()) return report_rpc_error(status);
  const std::string& name = HealthCheckResponse::ServingStatus_Name(response.status());
  std::printf("%s\n", name.empty() ? absl::StrCat("STATUS_", response.status()).c_str() : name.c_str());
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitNotServing;
}

}  // namespace frost::ctl
