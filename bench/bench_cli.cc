// frost-bench's per-mode flag tables and usage errors (see bench_cli.h).
#include "bench/bench_cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace frost::bench {
namespace {

// The running mode's table: frost-bench runs one mode per process.
cli::Command& mode_command() {
  static cli::Command* command = new cli::Command();
  return *command;
}

}  // namespace

void parse_mode_flags(cli::Command command, int argc, char** argv) {
  mode_command() = std::move(command);
  const std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::vector<std::string> positional = cli::parse_or_exit(mode_command(), args, 2);
  if (!positional.empty()) usage("unexpected argument '" + positional.front() + "'");
}

void usage(const std::string& msg) { cli::exit_usage_error(mode_command(), msg, 2); }

cli::Flag json_flag() {
  return cli::switch_flag("--json", [] {})
      .doc("print the result as one JSON object (the only output format)");
}

}  // namespace frost::bench
