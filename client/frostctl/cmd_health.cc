// frostctl health: grpc.health.v1.Health/Check. Prints the status name (SERVING, NOT_SERVING, ...) and exits
// 0 only for SERVING, so it works as a readiness probe (`frostctl health --service frost.v1.Generation &&
// ...`).
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace frost::ctl {

int run_health(const std::vector<std::string>& args, CommonOptions common) {
  using grpc::health::v1::HealthCheckResponse;
  grpc::health::v1::HealthCheckRequest request;
  const cli::Command command = make_command(
      "health", "[flags]", "Asks grpc.health.v1.Health/Check and prints the serving status.",
      {string_flag("--service", [&request](const std::string& v) { request.set_service(v); })
           .doc("NAME", "e.g. frost.v1.Generation (default \"\": the whole server)")},
      &common, "10",
      "Exit 0 when SERVING, 3 for any other status, 2 when the check fails (e.g. NOT_FOUND for a service the "
      "server does not know, UNAVAILABLE when nothing listens).");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (!positional->empty()) {
    return report_usage_error(absl::StrCat("health: unexpected argument \"", positional->front(), "\""),
                              command);
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
