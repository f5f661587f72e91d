// frostctl: command-line client of frostd's gRPC API. Subcommand dispatch and the common flags; the commands
// live in cmd_*.cc.
//
//   frostctl [--addr HOST:PORT] [--timeout SECONDS] [--token-file PATH] [--tls --ca FILE --cert FILE --key FILE
//            --server-name NAME] COMMAND [flags] ARGS
//   COMMAND: generate | tokenize | info | health | predict | train | jobs | artifacts | server-info
#include <cstdio>
#include <string>
#include <vector>

#include "client/frostctl/commands.h"
#include "client/frostctl/common.h"
#include "client/frostctl/flags.h"

namespace {

constexpr char kUsage[] =
    "usage: frostctl [--addr HOST:PORT] [--timeout SECONDS] [--token-file PATH] COMMAND [flags] ARGS\n"
    "\n"
    "commands:\n"
    "  generate PROMPT   stream a completion to stdout (summary on stderr)\n"
    "  tokenize TEXT     print the token ids of TEXT\n"
    "  info              print the served model's description\n"
    "  health            print the serving status; exit 0 only when SERVING\n"
    "  predict TEXT...   predict a value per text, with the prototypes that explain it\n"
    "  train submit prototype (--data PATH | --inline-jsonl FILE)\n"
    "  train submit kv-repair | kvsplice [--data PATH | --calib PATH]\n"
    "                    submit a training job; print its id (--watch: then follow it)\n"
    "  jobs list | get ID | cancel ID | watch ID\n"
    "                    list, show, cancel or follow training jobs\n"
    "  artifacts list | activate NAME | delete NAME\n"
    "                    the artifact registry\n"
    "  server-info       print the server's version, device, active artifacts and job counts\n"
    "\n"
    "common flags (before or after COMMAND):\n"
    "  --addr HOST:PORT    frostd's gRPC address (default localhost:50051)\n"
    "  --timeout SECONDS   call deadline (default: none for generate and jobs watch, 60 for\n"
    "                      predict and train submit, 120 for artifacts activate, 10 for the others)\n"
    "  --token-file PATH   bearer token sent as \"authorization: Bearer <token>\" (default:\n"
    "                      $FROST_TOKEN; train, jobs, artifacts and server-info need an admin token)\n"
    "  --tls               connect over TLS (implied by the four below)\n"
    "  --ca FILE           PEM roots that verify the server (default: the system's)\n"
    "  --cert FILE --key FILE\n"
    "                      this client's certificate and key, for servers that require them (mTLS)\n"
    "  --server-name NAME  name to check in the server's certificate (default: the --addr host)\n"
    "\n"
    "`frostctl COMMAND --help` lists a command's flags. Exit codes: 0 ok, 1 usage error (or an\n"
    "unreadable input file), 2 RPC error, 3 health answered but not SERVING, 4 a watched job\n"
    "ended FAILED, CANCELLED or INTERRUPTED.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace frost::ctl;
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return report_usage_error("no command given", kUsage);

  // Common flags (and --help) may precede the command name.
  CommonOptions common;
  bool help = false;
  std::vector<Flag> flags = common_flags(&common);
  flags.push_back(switch_flag("--help", [&help] { help = true; }));
  flags.push_back(switch_flag("-h", [&help] { help = true; }));
  absl::StatusOr<std::vector<std::string>> rest = parse_flags(args, flags, /*stop_at_positional=*/true);
  if (!rest.ok()) return report_usage_error(rest.status(), kUsage);
  if (help || (!rest->empty() && rest->front() == "help")) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (rest->empty()) return report_usage_error("no command given", kUsage);
  const std::string command = rest->front();
  const std::vector<std::string> command_args(rest->begin() + 1, rest->end());

  if (command == "generate") return run_generate(command_args, common);
  if (command == "tokenize") return run_tokenize(command_args, common);
  if (command == "info") return run_info(command_args, common);
  if (command == "health") return run_health(command_args, common);
  if (command == "predict") return run_predict(command_args, common);
  if (command == "train") return run_train(command_args, common);
  if (command == "jobs") return run_jobs(command_args, common);
  if (command == "artifacts") return run_artifacts(command_args, common);
  if (command == "server-info") return run_server_info(command_args, common);
  return report_usage_error("unknown command \"" + command + "\"", kUsage);
}
