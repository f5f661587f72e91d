#pragma once
// frostctl's command-line parsing is the programs' flag tables (core/flags/flags.h): each command lists the
// flags it accepts, with their help, in one table that parses the arguments and prints --help; values are
// parsed strictly and every error names the flag. These names bring it into frost::ctl, where the commands
// use it unqualified.
#include "core/flags/flags.h"

namespace frost::ctl {

using cli::double_flag;
using cli::Flag;
using cli::float_flag;
using cli::int32_flag;
using cli::parse_double;
using cli::string_flag;
using cli::switch_flag;
using cli::uint64_flag;
using cli::value_flag;

}  // namespace frost::ctl
