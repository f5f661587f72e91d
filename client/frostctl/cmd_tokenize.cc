// frostctl tokenize: Generation.Tokenize; prints the token ids on one line, space-separated.
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "frost/v1/generation.grpc.pb.h"

namespace frost::ctl {

const char kTokenizeUsage[] =
    "usage: frostctl tokenize [flags] TEXT      (TEXT \"-\" reads stdin)\n"
    "  --no-bos                  do not prepend BOS\n"
    "  --json                    print the response as a JSON line\n"
    "  --addr HOST:PORT  --timeout SECONDS (default 10)  --token-file PATH\n";

int run_tokenize(const std::vector<std::string>& args, CommonOptions common) {
  if (wants_help(args)) {
    std::fputs(kTokenizeUsage, stdout);
    return kExitOk;
  }
  frost::v1::TokenizeRequest request;
  bool json = false;
  std::vector<Flag> flags = common_flags(&common);
  flags.push_back(switch_flag("--no-bos", [&request] { request.set_add_bos(false); }));
  flags.push_back(switch_flag("--json", [&json] { json = true; }));
  absl::StatusOr<std::vector<std::string>> positional = parse_flags(args, flags);
  if (!positional.ok()) return report_usage_error(positional.status(), kTokenizeUsage);
  if (positional->size() != 1) {
    return report_usage_error(absl::StrCat("tokenize: expected one TEXT argument, got ", positional->size()),
                              kTokenizeUsage);
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
