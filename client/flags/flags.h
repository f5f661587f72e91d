#pragma once
// The command-line flag parser every frost program shares (frostctl, frost-generate, frost-bench,
// frost-loadgen): each program or command lists the flags it accepts in a small table; values are parsed
// strictly and every error names the flag and the value. Flags are written "--flag VALUE" or "--flag=VALUE";
// "--" ends the flags (so a prompt may start with a dash). Abseil only (no gRPC, no frost_core), so any
// program can link it.
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
};

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
