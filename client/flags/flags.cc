// The shared flag table parser and strict value parsers (see flags.h).
#include "client/flags/flags.h"

#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frost::cli {
namespace {

const Flag* find_flag(const std::vector<Flag>& flags, const std::string& name) {
  for (const Flag& f : flags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// The typed builders: parse the value with `parse`, then hand it to `set`.
template <typename T>
Flag typed_flag(const std::string& name, absl::StatusOr<T> (*parse)(const std::string&, const std::string&),
                std::function<void(T)> set) {
  return Flag{name, true, [name, parse, set = std::move(set)](const std::string& value) {
                absl::StatusOr<T> v = parse(name, value);
                if (!v.ok()) return v.status();
                set(*v);
                return absl::OkStatus();
              }};
}

// The bounded builders: parse the value with `parse`, refuse one below `min`, then hand it to `set`.
template <typename T>
Flag bounded_flag(const std::string& name, absl::StatusOr<T> (*parse)(const std::string&, const std::string&),
                  const char* what, T min, std::function<void(T)> set) {
  return Flag{name, true, [name, parse, what, min, set = std::move(set)](const std::string& value) {
                absl::StatusOr<T> v = parse(name, value);
                if (!v.ok()) return v.status();
                if (*v < min) return bad_value(name, absl::StrCat(what, " >= ", min), value);
                set(*v);
                return absl::OkStatus();
              }};
}

}  // namespace

absl::StatusOr<std::vector<std::string>> parse_flags(const std::vector<std::string>& args,
                                                     const std::vector<Flag>& flags,
                                                     bool stop_at_positional) {
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {  // a positional argument, "-" included
      if (stop_at_positional) {
        positional.insert(positional.end(), args.begin() + i, args.end());
        break;
      }
      positional.push_back(arg);
      continue;
    }
    // "--name=value" or "--name [value]".
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const Flag* flag = find_flag(flags, name);
    if (flag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", name));
    std::string value;
    if (eq != std::string::npos) {
      if (!flag->takes_value) return absl::InvalidArgumentError(absl::StrCat(name, " takes no value"));
      value = arg.substr(eq + 1);
    } else if (flag->takes_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      value = args[++i];
    }
    if (absl::Status s = flag->apply(value); !s.ok()) return s;
  }
  return positional;
}

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--") return false;
    if (arg == "-h" || arg == "--help") return true;
  }
  return false;
}

absl::Status bad_value(const std::string& flag, const std::string& expected, const std::string& value) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: expected %s, got \"%s\"", flag, expected, value));
}

absl::StatusOr<int32_t> parse_int32(const std::string& flag, const std::string& value) {
  int32_t v = 0;
  if (!absl::SimpleAtoi(value, &v)) return bad_value(flag, "a 32-bit integer", value);
  return v;
}

absl::StatusOr<int64_t> parse_int64(const std::string& flag, const std::string& value) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v)) return bad_value(flag, "a 64-bit integer", value);
  return v;
}

absl::StatusOr<uint64_t> parse_uint64(const std::string& flag, const std::string& value) {
  uint64_t v = 0;
  // Refuse a minus sign outright so no negative spelling can wrap around.
  if (value.empty() || value[0] == '-' || !absl::SimpleAtoi(value, &v)) {
    return bad_value(flag, "an unsigned 64-bit integer", value);
  }
  return v;
}

absl::StatusOr<float> parse_float(const std::string& flag, const std::string& value) {
  float v = 0;
  if (!absl::SimpleAtof(value, &v) || !std::isfinite(v)) return bad_value(flag, "a finite number", value);
  return v;
}

absl::StatusOr<double> parse_double(const std::string& flag, const std::string& value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v)) return bad_value(flag, "a finite number", value);
  return v;
}

Flag int32_flag(const std::string& name, std::function<void(int32_t)> set) {
  return typed_flag<int32_t>(name, parse_int32, std::move(set));
}
Flag int64_flag(const std::string& name, std::function<void(int64_t)> set) {
  return typed_flag<int64_t>(name, parse_int64, std::move(set));
}
Flag uint64_flag(const std::string& name, std::function<void(uint64_t)> set) {
  return typed_flag<uint64_t>(name, parse_uint64, std::move(set));
}
Flag float_flag(const std::string& name, std::function<void(float)> set) {
  return typed_flag<float>(name, parse_float, std::move(set));
}
Flag double_flag(const std::string& name, std::function<void(double)> set) {
  return typed_flag<double>(name, parse_double, std::move(set));
}

Flag int32_flag(const std::string& name, int32_t min, std::function<void(int32_t)> set) {
  return bounded_flag<int32_t>(name, parse_int32, "an integer", min, std::move(set));
}
Flag int64_flag(const std::string& name, int64_t min, std::function<void(int64_t)> set) {
  return bounded_flag<int64_t>(name, parse_int64, "an integer", min, std::move(set));
}
Flag double_flag(const std::string& name, double min, std::function<void(double)> set) {
  return bounded_flag<double>(name, parse_double, "a number", min, std::move(set));
}

Flag string_flag(const std::string& name, std::function<void(const std::string&)> set) {
  return Flag{name, true, [set = std::move(set)](const std::string& value) {
                set(value);
                return absl::OkStatus();
              }};
}

Flag switch_flag(const std::string& name, std::function<void()> set) {
  return Flag{name, false, [set = std::move(set)](const std::string&) {
                set();
                return absl::OkStatus();
              }};
}

}  // namespace frost::cli
