// frostctl artifacts and server-info: the Admin service. `artifacts list` prints the registry as a table,
// `artifacts activate` / `delete` act on one artifact by name ("prototype/3"), `server-info` prints the
// server's facts one "key: value" line each.
#include <grpcpp/client_context.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"
#include "client/frostctl/format.h"
#include "frost/v1/admin.grpc.pb.h"

namespace frost::ctl {

namespace {

// Deadline of ActivateArtifact: it loads and verifies the artifact before it answers.
constexpr double kActivateTimeoutS = 120;

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

// `artifacts` before its subcommand: the common flags and the list of subcommands.
cli::Command artifacts_command(CommonOptions* common) {
  cli::Command c =
      make_command("artifacts", "[common flags] SUBCOMMAND [flags] ARGS",
                   "The artifact registry (the Admin service).", {}, common, "10; activate: 120");
  c.commands = {{"list", "the registry as a table"},
                {"activate NAME", "load, verify and activate NAME (e.g. prototype/3)"},
                {"delete NAME", "delete NAME (the active artifact is refused)"}};
  c.footer = "`frostctl artifacts SUBCOMMAND --help` lists a subcommand's flags.";
  return c;
}

int run_list(const std::vector<std::string>& args, CommonOptions common) {
  frost::v1::ListArtifactsRequest request;
  bool json = false;
  const cli::Command command =
      make_command("artifacts list", "[flags]",
                   "The artifact registry as a table (NAME ACTIVE BYTES DEVICE_BYTES JOB BACKBONE CREATED).",
                   {string_flag("--kind", [&request](const std::string& v) { request.set_kind(v); })
                        .doc("KIND", "only artifacts of this kind (prototype, kv_repair, kvsplice)"),
                    switch_flag("--json", [&json] { json = true; }).doc("one JSON line per artifact")},
                   &common, "10");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (!positional->empty()) {
    return report_usage_error(
        absl::StrCat("artifacts list: unexpected argument \"", positional->front(), "\""), command);
  }
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<frost::v1::Admin::Stub> stub = frost::v1::Admin::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, kDefaultTimeoutS, &ctx);
  frost::v1::ListArtifactsResponse response;
  const grpc::Status status = stub->ListArtifacts(&ctx, request, &response);
  if (!status.ok()) return report_rpc_error(status);
  if (json) {
    for (const frost::v1::Artifact& a : response.artifacts()) print_json_line(a);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const frost::v1::Artifact& a : response.artifacts()) {
    rows.push_back({a.name(), a.active() ? "yes" : "no", format_bytes(a.bytes()),
                    a.device_bytes() > 0 ? format_bytes(a.device_bytes()) : "-", or_dash(a.job_id()),
                    or_dash(a.backbone()), format_unix_time(a.created_unix())});
  }
  std::fputs(
      render_table({"NAME", "ACTIVE", "BYTES", "DEVICE_BYTES", "JOB", "BACKBONE", "CREATED"}, rows).c_str(),
      stdout);
  return kExitOk;
}

// activate and delete: one artifact NAME.
int run_activate_or_delete(const std::vector<std::string>& args, CommonOptions common, bool activate) {
  const char* subcommand = activate ? "activate" : "delete";
  bool json = false;
  std::vector<Flag> own;
  if (activate)
    own.push_back(switch_flag("--json", [&json] { json = true; }).doc("print the Artifact as a JSON line"));
  const cli::Command command =
      activate
          ? make_command("artifacts activate", "[flags] NAME",
                         "Loads, verifies and activates the artifact NAME (e.g. prototype/3); requests in "
                         "flight finish on the previous version.",
                         std::move(own), &common, "120")
          : make_command("artifacts delete", "[flags] NAME",
                         "Deletes the artifact NAME (the active artifact is refused).", std::move(own),
                         &common, "10");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (positional->size() != 1 || positional->front().empty()) {
    return report_usage_error(absl::StrCat("artifacts ", subcommand,
                                           ": expected one artifact NAME argument, got ", positional->size()),
                              command);
  }
  const std::string& name = positional->front();
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<frost::v1::Admin::Stub> stub = frost::v1::Admin::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  if (activate) {
    prepare_context(common, kActivateTimeoutS, &ctx);
    frost::v1::ActivateArtifactRequest request;
    request.set_name(name);
    frost::v1::Artifact artifact;
    const grpc::Status status = stub->ActivateArtifact(&ctx, request, &artifact);
    if (!status.ok()) return report_rpc_error(status);
    if (json) {
      print_json_line(artifact);
    } else {
      std::printf("activated %s\n", or_dash(artifact.name()).c_str());
    }
    return kExitOk;
  }
  prepare_context(common, kDefaultTimeoutS, &ctx);
  frost::v1::DeleteArtifactRequest request;
  request.set_name(name);
  frost::v1::DeleteArtifactResponse response;
  const grpc::Status status = stub->DeleteArtifact(&ctx, request, &response);
  if (!status.ok()) return report_rpc_error(status);
  std::printf("deleted %s\n", name.c_str());
  return kExitOk;
}

}  // namespace

int run_artifacts(const std::vector<std::string>& args, CommonOptions common) {
  int exit_code = kExitOk;
  const cli::Command group = artifacts_command(&common);
  const std::optional<Subcommand> sub = parse_subcommand(args, group, &exit_code);
  if (!sub) return exit_code;
  if (sub->name == "list") return run_list(sub->args, common);
  if (sub->name == "activate") return run_activate_or_delete(sub->args, common, /*activate=*/true);
  if (sub->name == "delete") return run_activate_or_delete(sub->args, common, /*activate=*/false);
  return report_usage_error(absl::StrCat("artifacts: unknown subcommand \"", sub->name, "\""), group);
}

int run_server_info(const std::vector<std::string>& args, CommonOptions common) {
  bool json = false;
  const cli::Command command = make_command(
      "server-info", "[flags]",
      "Prints the server's version, model, device, store bytes, active artifacts and job counts "
      "(Admin.GetServerInfo).",
      {switch_flag("--json", [&json] { json = true; }).doc("print the ServerInfo message as a JSON line")},
      &common, "10");
  int exit_code = kExitOk;
  const std::optional<std::vector<std::string>> positional = parse_args(command, args, &exit_code);
  if (!positional) return exit_code;
  if (!positional->empty()) {
    return report_usage_error(absl::StrCat("server-info: unexpected argument \"", positional->front(), "\""),
                              command);
  }
  if (absl::Status s = resolve_credentials(&common); !s.ok()) return report_input_error(s);

  std::unique_ptr<frost::v1::Admin::Stub> stub = frost::v1::Admin::NewStub(make_channel(common));
  grpc::ClientContext ctx;
  prepare_context(common, kDefaultTimeoutS, &ctx);
  frost::v1::ServerInfo info;
  const grpc::Status status = stub->GetServerInfo(&ctx, frost::v1::ServerInfoRequest(), &info);
  if (!status.ok()) return report_rpc_error(status);
  if (json) {
    print_json_line(info);
    return kExitOk;
  }
  std::printf("version: %s\n", or_dash(info.version()).c_str());
  std::printf("model: %s\n", or_dash(info.model()).c_str());
  std::printf("device: %s\n", or_dash(info.device()).c_str());
  // One line per device, sorted (a proto map has no order).
  std::vector<std::pair<std::string, int64_t>> store(info.store_bytes().begin(), info.store_bytes().end());
  std::sort(store.begin(), store.end());
  if (store.empty()) std::printf("store_bytes: -\n");
  for (const auto& [device, bytes] : store) {
    std::printf("store_bytes.%s: %lld (%s)\n", device.c_str(), static_cast<long long>(bytes),
                format_bytes(bytes).c_str());
  }
  std::printf("active_artifacts: %s\n", or_dash(absl::StrJoin(info.active_artifacts(), ", ")).c_str());
  std::printf("jobs_queued: %d\n", info.jobs_queued());
  std::printf("jobs_running: %d\n", info.jobs_running());
  std::printf("state_dir: %s\n", or_dash(info.state_dir()).c_str());
  return kExitOk;
}

}  // namespace frost::ctl
