#pragma once
// frostctl's command-line parsing: each command lists the flags it accepts in a small table; values are
// parsed strictly and every error names the flag. Flags are written "--flag VALUE" or "--flag=VALUE"; "--"
// ends the flags (so a prompt may start with a dash).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost::ctl {

// One flag a command accepts. `apply` gets the value ("" for a switch) and returns INVALID_ARGUMENT naming
// the flag when the value is bad. A repeatable flag's `apply` appends; any other flag given twice keeps the
// last value.
struct Flag {
  std::string name;         // with the dashes, e.g. "--top-k"
  bool takes_value = true;  // false: a switch such as "--no-bos"
  std::function<absl::Status(const std::string& value)> apply;
};

// Parses `args` against `flags`, calling each flag's `apply` in order, and returns the positional arguments.
// Unknown flags, a missing value, a value given to a switch and values `apply` rejects are INVALID_ARGUMENT.
// "-" alone and everything after "--" are positional. With stop_at_positional, parsing ends at the first
// positional argument, which is returned with everything after it, unparsed (used for the flags before the
// command name).
absl::StatusOr<std::vector<std::string>> parse_flags(const std::vector<std::string>& args,
                                                     const std::vector<Flag>& flags,
                                                     bool stop_at_positional = false);

// True when "-h" or "--help" occurs before any "--".
bool wants_help(const std::vector<std::string>& args);

// Strict value parsers (the whole value must parse): INVALID_ARGUMENT `<flag>: expected <what>, got
// "<value>"`. Floating-point values must be finite.
absl::StatusOr<int32_t> parse_int32(const std::string& flag, const std::string& value);
absl::StatusOr<uint64_t> parse_uint64(const std::string& flag, const std::string& value);
absl::StatusOr<float> parse_float(const std::string& flag, const std::string& value);
absl::StatusOr<double> parse_double(const std::string& flag, const std::string& value);

// Flag builders: parse the value with the parser above, then hand it to `set`.
Flag int32_flag(const std::string& name, std::function<void(int32_t)> set);
Flag uint64_flag(const std::string& name, std::function<void(uint64_t)> set);
Flag float_flag(const std::string& name, std::function<void(float)> set);
Flag double_flag(const std::string& name, std::function<void(double)> set);
Flag string_flag(const std::string& name, std::function<void(const std::string&)> set);
Flag switch_flag(const std::string& name, std::function<void()> set);

}  // namespace frost::ctl
