// frostctl info: Generation.GetModelInfo; prints one "field: value" line per ModelInfo field.
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
#include "frost/v1/generation.grpc.pb.h"

namespace frost::ctl {

int run_info(const std::vector<std::string>& args, CommonOptions common) {
  bool json = false;
  const cli::Command command = make_command(
      "info", "[flags]", "Prints the served model's description (Generation.GetModelInfo), one field a line.",
      {switch_flag("--json", [&json] { json = true; }).doc("print the ModelInfo message as a JSON line")},
      &common, "10");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (!positional->empty()) {
    return report_usage_error(absl::StrCat("info: unexpected argument \"", positional->front(), "\""),
                              command);
  }

  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<frost::v1::Generation::Stub> stub = frost::v1::Generation::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, kDefaultTimeoutS, &ctx);
  frost::v1::ModelInfo info;
  const grpc::Status status = stub->GetModelInfo(&ctx, frost::v1::ModelInfoRequest(), &info);
  if (!status.ok()) return report_rpc_error(status);
  if (json) {
    print_json_line(info);
    return kExitOk;
  }
  std::printf("name: %s\n", info.name().c_str());
  std::printf("architecture: %s\n", info.architecture().c_str());
  std::printf("context_length: %d\n", info.context_length());
  std::printf("vocab_size: %d\n", info.vocab_size());
  std::printf("n_params: %lld\n", static_cast<long long>(info.n_params()));
  std::printf("weight_dtype: %s\n", info.weight_dtype().c_str());
  std::printf("weight_bytes: %lld (%.1f MiB)\n", static_cast<long long>(info.weight_bytes()),
              static_cast<double>(info.weight_bytes()) / (1 << 20));
  std::printf("device: %s (%s)\n", info.device().c_str(), info.device_name().c_str());
  if (info.device_bytes() > 0)
    std::printf("device_bytes: %lld (%.1f MiB: weights and KV pool)\n",
                static_cast<long long>(info.device_bytes()),
                static_cast<double>(info.device_bytes()) / (1 << 20));
  std::printf("kernels: %s\n", info.kernels().c_str());
  std::printf("kv_codec: %s\n", info.kv_codec().c_str());
  std::printf("kv_cache: %lld blocks × %lld bytes = %.1f MiB (%d positions per block at %s)\n",
              static_cast<long long>(info.kv_blocks()), static_cast<long long>(info.kv_block_bytes()),
              static_cast<double>(info.kv_cache_bytes()) / (1 << 20), info.kv_block_tokens(),
              info.device() == "cpu" || info.device().empty() ? "fp32" : info.kv_codec().c_str());
  std::printf("max_running: %d\n", info.max_running());
  std::printf("max_batch_tokens: %d\n", info.max_batch_tokens());
  std::printf("prefix_caching: %s\n", info.prefix_caching() ? "on" : "off");
  return kExitOk;
}

}  // namespace frost::ctl
