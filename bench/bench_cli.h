#pragma once
// frost-bench's command line: each mode parses argv[2..] with its flag table (core/flags/flags.h), which also
// prints the mode's --help and the usage after an error; bench::usage() reports the errors a mode finds
// after parsing (a missing --model, a value out of range) with the same table.
#include <string>

#include "core/flags/flags.h"

namespace frost::bench {

// Parses argv[2..] (what follows the mode) with `command` and keeps it for usage(): -h / --help prints the
// help and exits 0; a bad flag or any positional argument is a usage error (exit 2).
void parse_mode_flags(cli::Command command, int argc, char** argv);

// "frost-bench: <msg>", a blank line and the mode's help on stderr; exit 2. Needs parse_mode_flags first.
[[noreturn]] void usage(const std::string& msg);

// The --json switch every mode accepts (JSON is the only output format).
cli::Flag json_flag();

}  // namespace frost::bench
