// frostctl: command-line client of frostd's gRPC API. Subcommand dispatch and the common flags; the commands
// live in cmd_*.cc. `frostctl --help` lists the commands, `frostctl COMMAND --help` a command's flags: both
// generated from the flag tables that parse them (core/flags/flags.h).
#include <cstdio>
#include <string>
#include <vector>

#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"

namespace {

// The top level: the common flags (accepted before the command name too) and the list of commands.
frost::cli::Command frostctl_command(frost::ctl::CommonOptions* common) {
  frost::cli::Command c;
  c.name = "frostctl";
  c.synopsis = "[common flags] COMMAND [flags] ARGS";
  c.description = "The command-line client of frostd's gRPC API.";
  c.flag_groups = {
      {"common flags (before or after COMMAND)",
       frost::ctl::common_flags(
           common,
           "none for generate and jobs watch, 60 for predict and train submit, 120 for artifacts "
           "activate, 10 for the others")}};
  c.commands = {
      {"generate PROMPT", "stream a completion to stdout (summary on stderr)"},
      {"tokenize TEXT", "print the token ids of TEXT"},
      {"embed TEXT...", "print the embedding of each TEXT (one line of values each)"},
      {"info", "print the served model's description"},
      {"health", "print the serving status; exit 0 only when SERVING"},
      {"predict TEXT...", "predict a value per text, with the prototypes that explain it"},
      {"train submit KIND",
       "submit a training job (prototype | kv-repair | kvsplice); print its id (--watch: then "
       "follow it)"},
      {"jobs list | get ID | cancel ID | watch ID", "list, show, cancel or follow training jobs"},
      {"artifacts list | activate NAME | delete NAME", "the artifact registry"},
      {"server-info", "print the server's version, device, active artifacts and job counts"},
      {"help", "print this help"},
  };
  c.footer =
      "`frostctl COMMAND --help` lists a command's flags. Exit codes: 0 ok, 1 usage error (or an unreadable "
      "input file), 2 RPC error, 3 health answered but not SERVING, 4 a watched job ended FAILED, CANCELLED "
      "or INTERRUPTED.";
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace frost::ctl;
  const std::vector<std::string> args(argv + 1, argv + argc);
  CommonOptions common;
  const frost::cli::Command command = frostctl_command(&common);
  if (args.empty()) return report_usage_error("no command given", command);

  // Common flags (and --help) may precede the command name.
  absl::StatusOr<frost::cli::ParsedArgs> parsed =
      frost::cli::parse_command(command, args, /*stop_at_positional=*/true);
  if (!parsed.ok()) return report_usage_error(parsed.status(), command);
  const std::vector<std::string>& rest = parsed->positional;
  if (parsed->help || (!rest.empty() && rest.front() == "help")) {
    frost::cli::print_help(command);
    return kExitOk;
  }
  if (rest.empty()) return report_usage_error("no command given", command);
  const std::string name = rest.front();
  const std::vector<std::string> command_args(rest.begin() + 1, rest.end());

  if (name == "generate") return run_generate(command_args, common);
  if (name == "tokenize") return run_tokenize(command_args, common);
  if (name == "embed") return run_embed(command_args, common);
  if (name == "info") return run_info(command_args, common);
  if (name == "health") return run_health(command_args, common);
  if (name == "predict") return run_predict(command_args, common);
  if (name == "train") return run_train(command_args, common);
  if (name == "jobs") return run_jobs(command_args, common);
  if (name == "artifacts") return run_artifacts(command_args, common);
  if (name == "server-info") return run_server_info(command_args, common);
  return report_usage_error("unknown command \"" + name + "\"", command);
}
