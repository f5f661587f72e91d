// frostctl tokenize: Generation.Tokenize; prints the token ids on one line, space-separated.
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "frost/v1/generation.grpc.pb.h"

namespace frost::ctl {

int run_tokenize(const std::vector<std::string>& args, CommonOptions common) {
  frost::v1::TokenizeRequest request;
  bool json = false;
  const cli::Command command = make_command(
      "tokenize", "[flags] TEXT", "Prints the token ids of TEXT on one line (TEXT \"-\" reads stdin).",
      {switch_flag("--no-bos", [&request] { request.set_add_bos(false); }).doc("do not prepend BOS"),
       switch_flag("--json", [&json] { json = true; }).doc("print the response as a JSON line")},
      &common, "10");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (positional->size() != 1) {
    return report_usage_error(absl::StrCat("tokenize: expected one TEXT argument, got ", positional->size()),
                              command);
  }
  request.set_text(positional->front() == "-" ? read_stdin() : positional->front());

  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<frost::v1::Generation::Stub> stub = frost::v1::Generation::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, kDefaultTimeoutS, &ctx);
  frost::v1::TokenizeResponse response;
  const grpc::Status status = stub->Tokenize(&ctx, request, &response);
  if (!status.ok()) return report_rpc_error(status);
  if (json) {
    print_json_line(response);
  } else {
    std::printf("%s\n", absl::StrJoin(response.token_ids(), " ").c_str());
  }
  return kExitOk;
}

}  // namespace frost::ctl
