#pragma once
// The command-line flags of every frost program (frostd, frostctl and each of its commands, frost-generate,
// frost-bench and its modes, frost-loadgen, frost-cuda-bench, frost_fuzz_make_seeds): each program or command
// lists the flags it accepts in one table, a Command; the same table parses the arguments and generates the
// --help text and the usage printed with a usage error, so a flag cannot be accepted without being
// documented, nor documented without being accepted. Values are parsed strictly and every error names the
// flag and the value. Flags are written "--flag VALUE" or "--flag=VALUE"; "--" ends the flags (so a prompt
// may start with a dash). Abseil only (no LibTorch, no gRPC, no other core layer), so any program can link it
// (library frost_flags).
//
// Why not Abseil's flags (ABSL_FLAG), although Abseil is linked: its flags are process-global definitions,
// while frostctl and frost-bench have a flag set per command (`frostctl jobs list --state` and `frostctl
// generate --stop` are different flags; `--timeout` has a different default per command); its --help lists
// every flag linked into the binary (gRPC's and Abseil's own among them: --helpfull noise) rather than the
// command's; it has no "--" positional handling per command nor "stop at the command name"; and its error
// text and exit code differ from what our scripts and tests check (frostctl exits 1 on a usage error, the
// others 2). A small table parser gives the UX we document in a few hundred lines (README "Command-line
// flags").
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost::cli {

// One flag a program accepts. `apply` gets the value ("" for a switch) and returns INVALID_ARGUMENT naming
// the flag when the value is bad. A repeatable flag's `apply` appends; any other flag given twice keeps the
// last value.
struct Flag {
  std::string name;         // with the dashes, e.g. "--top-k"
  bool takes_value = true;  // false: a switch such as "--no-bos"
  std::function<absl::Status(const std::string& value)> apply;
  // For --help: the value's placeholder ("N", "HOST:PORT"; a flag that takes a value must have one, a switch
  // none) and what the flag does (required in a Command; "\n" starts a new line, long lines are wrapped).
  std::string value_name;
  std::string help;

  // Sets value_name and help: `int32_flag("--top-k", set).doc("K", "sample among the K likeliest")`.
  Flag doc(std::string value, std::string text) &&;
  // The same for a switch (no value).
  Flag doc(std::string text) &&;
};

// A program, or one command of a program with several (frostctl jobs list, frost-bench kv-repair): its flag
// table and the text around it. parse_command() parses with it and format_help() prints it, so the help
// cannot drift from what is accepted. Every command also accepts -h / --help (not listed in its tables).
struct FlagGroup {
  std::string title;  // "flags", "common flags (before or after COMMAND)", ...
  std::vector<Flag> flags;
};
struct CommandEntry {  // a subcommand or mode listed in the help: "jobs list | get ID", "stream a completion"
  std::string name;
  std::string help;
};
struct Command {
  std::string name;         // as typed: "frostd", "frostctl jobs"
  std::string synopsis;     // what follows the name on the usage line, e.g. "[flags] PROMPT"; "\n" separates
                            // alternative forms, each printed on its own usage line
  std::string description;  // a paragraph after the usage line ("" for none)
  std::vector<FlagGroup> flag_groups;
  std::string commands_title = "commands";
  std::vector<CommandEntry> commands;
  std::string footer;  // a closing paragraph: exit codes, notes ("" for none)

  // Every flag of every group, in order (what parse_command accepts besides -h / --help).
  std::vector<Flag> all_flags() const;
};

// The --help text of `command`: usage line(s), description, each flag group ("  --flag VALUE  help", -h /
// --help added to the first), the commands, the footer. Ends in a newline.
std::string format_help(const Command& command);

// What parse_command found: the positional arguments, and whether -h / --help was given.
struct ParsedArgs {
  std::vector<std::string> positional;
  bool help = false;
};

// parse_flags() over command.all_flags() plus -h / --help. When -h / --help occurs (before "--" and not as
// a flag's value) the result has help set, even if other arguments are bad: asking for help always works.
// A malformed table (a flag without help, a value without a placeholder, a name twice) is a programming
// error: the process aborts naming the flag, so the --help test of every program catches it.
absl::StatusOr<ParsedArgs> parse_command(const Command& command, const std::vector<std::string>& args,
                                         bool stop_at_positional = false);

// For programs that exit on a usage error: parse_command() on `args`; --help prints format_help() to stdout
// and exits 0; a bad argument prints "<program>: <message>", a blank line and the help to stderr and exits
// with `usage_exit_code`. Returns the positional arguments. <program> is the first word of command.name.
std::vector<std::string> parse_or_exit(const Command& command, const std::vector<std::string>& args,
                                       int usage_exit_code, bool stop_at_positional = false);

// The usage error of parse_or_exit for a check the program makes after parsing (a missing required flag, a
// value out of range): message and help to stderr, exit `usage_exit_code`.
[[noreturn]] void exit_usage_error(const Command& command, const std::string& message, int usage_exit_code);

// The help text to stdout (for a command that prints its help without parsing, e.g. `frostctl help`).
void print_help(const Command& command);

// Parses `args` against `flags`, calling each flag's `apply` in order, and returns the positional arguments.
// Unknown flags, a missing value, a value given to a switch and values `apply` rejects are INVALID_ARGUMENT.
// A flag that takes a value takes the next argument whatever it looks like ("--prompt --x" sets the prompt
// to "--x"). "-" alone and everything after "--" are positional. With stop_at_positional, parsing ends at
// the first positional argument, which is returned with everything after it, unparsed (used for the flags
// before a command name).
absl::StatusOr<std::vector<std::string>> parse_flags(const std::vector<std::string>& args,
                                                     const std::vector<Flag>& flags,
                                                     bool stop_at_positional = false);

// True when "-h" or "--help" occurs before any "--".
bool wants_help(const std::vector<std::string>& args);

// The error of a value a flag does not accept: INVALID_ARGUMENT `<flag>: expected <expected>, got "<value>"`
// (what the parsers below return; for a program's own checks, e.g. a range).
absl::Status bad_value(const std::string& flag, const std::string& expected, const std::string& value);

// Strict value parsers (the whole value must parse; surrounding whitespace is allowed): bad_value()
// otherwise. Floating-point values must be finite; unsigned values refuse any minus sign.
absl::StatusOr<int32_t> parse_int32(const std::string& flag, const std::string& value);
absl::StatusOr<int64_t> parse_int64(const std::string& flag, const std::string& value);
absl::StatusOr<uint64_t> parse_uint64(const std::string& flag, const std::string& value);
absl::StatusOr<float> parse_float(const std::string& flag, const std::string& value);
absl::StatusOr<double> parse_double(const std::string& flag, const std::string& value);

// A flag with a value and a custom `apply` (a choice among names, a list): INVALID_ARGUMENT naming the flag
// from `apply` when the value is bad, e.g. bad_value().
Flag value_flag(const std::string& name, std::function<absl::Status(const std::string& value)> apply);

// Flag builders: parse the value with the parser above, then hand it to `set`.
Flag int32_flag(const std::string& name, std::function<void(int32_t)> set);
Flag int64_flag(const std::string& name, std::function<void(int64_t)> set);
Flag uint64_flag(const std::string& name, std::function<void(uint64_t)> set);
Flag float_flag(const std::string& name, std::function<void(float)> set);
Flag double_flag(const std::string& name, std::function<void(double)> set);
// The same with a lower bound: a value below `min` is bad_value(name, "an integer >= <min>" or "a number >=
// <min>", value).
Flag int32_flag(const std::string& name, int32_t min, std::function<void(int32_t)> set);
Flag int64_flag(const std::string& name, int64_t min, std::function<void(int64_t)> set);
Flag double_flag(const std::string& name, double min, std::function<void(double)> set);
Flag string_flag(const std::string& name, std::function<void(const std::string&)> set);
Flag switch_flag(const std::string& name, std::function<void()> set);

}  // namespace frost::cli
