// frostctl embed: Generation.Embed; prints one line per TEXT, its embedding's values space-separated (or the
// response as a JSON line with --json).
#include <grpcpp/client_context.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "frost/v1/generation.grpc.pb.h"

namespace frost::ctl {

int run_embed(const std::vector<std::string>& args, CommonOptions common) {
  bool json = false;
  const cli::Command command =
      make_command("embed", "[flags] TEXT...",
                   "Prints the embedding of each TEXT (mean of the final-norm hidden states, norm 1) on its "
                   "own line, values "
                   "space-separated (TEXT \"-\" reads stdin).",
                   {switch_flag("--json", [&json] { json = true; }).doc("print the response as a JSON line")},
                   &common, "10");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (positional->empty()) return report_usage_error("embed: expected at least one TEXT argument", command);
  frost::v1::EmbedRequest request;
  for (const std::string& t : *positional) request.add_texts(t == "-" ? read_stdin() : t);

  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<frost::v1::Generation::Stub> stub = frost::v1::Generation::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, kDefaultTimeoutS, &ctx);
  frost::v1::EmbedResponse response;
  const grpc::Status status = stub->Embed(&ctx, request, &response);
  if (!status.ok()) return report_rpc_error(status);
  if (json) {
    print_json_line(response);
    return kExitOk;
  }
  for (const frost::v1::Embedding& e : response.embeddings()) {
    std::string line;
    for (int i = 0; i < e.values_size(); ++i)
      absl::StrAppend(&line, i ? " " : "", absl::StrFormat("%.9g", e.values(i)));
    std::printf("%s\n", line.c_str());
  }
  return kExitOk;
}

}  // namespace frost::ctl
