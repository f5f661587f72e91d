// The shared flag table parser and strict value parsers (see flags.h).
#include "core/flags/flags.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace frost::cli {
namespace {

Flag make_switch(const std::string& name, std::function<absl::Status(const std::string&)> apply) {
  Flag f;
  f.name = name;
  f.takes_value = false;
  f.apply = std::move(apply);
  return f;
}

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
  return value_flag(name, [name, parse, set = std::move(set)](const std::string& value) {
    absl::StatusOr<T> v = parse(name, value);
    if (!v.ok()) return v.status();
    set(*v);
    return absl::OkStatus();
  });
}

// The bounded builders: parse the value with `parse`, refuse one below `min`, then hand it to `set`.
template <typename T>
Flag bounded_flag(const std::string& name, absl::StatusOr<T> (*parse)(const std::string&, const std::string&),
                  const char* what, T min, std::function<void(T)> set) {
  return value_flag(name, [name, parse, what, min, set = std::move(set)](const std::string& value) {
    absl::StatusOr<T> v = parse(name, value);
    if (!v.ok()) return v.status();
    if (*v < min) return bad_value(name, absl::StrCat(what, " >= ", min), value);
    set(*v);
    return absl::OkStatus();
  });
}

// The help column: flag names and values are padded to kHelpColumn; a longer one puts its help on the next
// line. Help text is wrapped at kWidth.
constexpr size_t kHelpColumn = 30;
constexpr size_t kWidth = 110;

// A malformed table is a bug in the program, not a user error: say which flag and stop.
[[noreturn]] void bad_table(const Command& command, const std::string& what) {
  std::fprintf(stderr, "%s: bad flag table: %s\n", command.name.c_str(), what.c_str());
  std::abort();
}

void check_table(const Command& command) {
  std::set<std::string> seen = {"-h", "--help"};
  for (const FlagGroup& group : command.flag_groups) {
    for (const Flag& f : group.flags) {
      if (f.name.size() < 2 || f.name[0] != '-')
        bad_table(command, absl::StrCat("flag name \"", f.name, "\""));
      if (!seen.insert(f.name).second) bad_table(command, absl::StrCat(f.name, " is listed twice"));
      if (f.help.empty()) bad_table(command, absl::StrCat(f.name, " has no help text"));
      if (f.takes_value == f.value_name.empty()) {
        bad_table(command, absl::StrCat(f.name, f.takes_value ? " takes a value but names none"
                                                              : " is a switch but names a value"));
      }
      if (!f.apply) bad_table(command, absl::StrCat(f.name, " has no apply"));
    }
  }
}

// Appends `text` wrapped at kWidth, every line indented by `indent` spaces except the first, which starts
// at column `column` (already written). "\n" in the text starts a new line.
void append_wrapped(std::string* out, const std::string& text, size_t indent, size_t column) {
  bool first_line = true;
  for (absl::string_view para : absl::StrSplit(text, '\n')) {
    if (!first_line) {
      out->push_back('\n');
      out->append(indent, ' ');
      column = indent;
    }
    first_line = false;
    // Leading spaces of a line are kept (for hand-indented continuation lines).
    size_t lead = 0;
    while (lead < para.size() && para[lead] == ' ') ++lead;
    out->append(lead, ' ');
    column += lead;
    const size_t line_start = column;
    for (absl::string_view word : absl::StrSplit(para.substr(lead), ' ', absl::SkipEmpty())) {
      if (column > line_start && column + 1 + word.size() > kWidth) {
        out->push_back('\n');
        out->append(indent + lead, ' ');
        column = indent + lead;
      } else if (column > line_start) {
        out->push_back(' ');
        ++column;
      }
      out->append(word.data(), word.size());
      column += word.size();
    }
  }
  out->push_back('\n');
}

// "  --name VALUE" padded to the help column (or a line of its own), then the wrapped help.
void append_entry(std::string* out, const std::string& left, const std::string& help) {
  std::string line = absl::StrCat("  ", left);
  if (line.size() + 2 <= kHelpColumn) {
    line.append(kHelpColumn - line.size(), ' ');
  } else {
    line.push_back('\n');
    line.append(kHelpColumn, ' ');
  }
  out->append(line);
  append_wrapped(out, help, kHelpColumn, kHelpColumn);
}

}  // namespace

Flag value_flag(const std::string& name, std::function<absl::Status(const std::string& value)> apply) {
  Flag f;
  f.name = name;
  f.apply = std::move(apply);
  return f;
}

Flag Flag::doc(std::string value, std::string text) && {
  value_name = std::move(value);
  help = std::move(text);
  return std::move(*this);
}

Flag Flag::doc(std::string text) && {
  help = std::move(text);
  return std::move(*this);
}

std::vector<Flag> Command::all_flags() const {
  std::vector<Flag> all;
  for (const FlagGroup& group : flag_groups) all.insert(all.end(), group.flags.begin(), group.flags.end());
  return all;
}

std::string format_help(const Command& command) {
  check_table(command);
  std::string out;
  bool first = true;
  for (absl::string_view form : absl::StrSplit(command.synopsis, '\n')) {
    absl::StrAppend(&out, first ? "usage: " : "       ", command.name, form.empty() ? "" : " ", form, "\n");
    first = false;
  }
  if (!command.description.empty()) {
    out.push_back('\n');
    append_wrapped(&out, command.description, 0, 0);
  }
  bool help_listed = false;
  for (const FlagGroup& group : command.flag_groups) {
    if (group.flags.empty()) continue;
    absl::StrAppend(&out, "\n", group.title, ":\n");
    for (const Flag& f : group.flags) {
      append_entry(&out, f.takes_value ? absl::StrCat(f.name, " ", f.value_name) : f.name, f.help);
    }
    if (!help_listed) append_entry(&out, "-h, --help", "print this help and exit");
    help_listed = true;
  }
  if (!help_listed) {
    absl::StrAppend(&out, "\nflags:\n");
    append_entry(&out, "-h, --help", "print this help and exit");
  }
  if (!command.commands.empty()) {
    absl::StrAppend(&out, "\n", command.commands_title, ":\n");
    for (const CommandEntry& c : command.commands) append_entry(&out, c.name, c.help);
  }
  if (!command.footer.empty()) {
    out.push_back('\n');
    append_wrapped(&out, command.footer, 0, 0);
  }
  return out;
}

absl::StatusOr<ParsedArgs> parse_command(const Command& command, const std::vector<std::string>& args,
                                         bool stop_at_positional) {
  check_table(command);
  ParsedArgs parsed;
  std::vector<Flag> flags = command.all_flags();
  flags.push_back(make_switch("--help", [&parsed](const std::string&) {
    parsed.help = true;
    return absl::OkStatus();
  }));
  flags.push_back(make_switch("-h", [&parsed](const std::string&) {
    parsed.help = true;
    return absl::OkStatus();
  }));
  absl::StatusOr<std::vector<std::string>> positional = parse_flags(args, flags, stop_at_positional);
  if (!positional.ok()) {
    // Asking for help works even beside a bad argument ("frostd --bogus --help").
    if (wants_help(args)) return ParsedArgs{{}, true};
    return positional.status();
  }
  parsed.positional = *std::move(positional);
  return parsed;
}

void print_help(const Command& command) { std::fputs(format_help(command).c_str(), stdout); }

void exit_usage_error(const Command& command, const std::string& message, int usage_exit_code) {
  const std::string program = command.name.substr(0, command.name.find(' '));
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %s\n\n%s", program.c_str(), message.c_str(), format_help(command).c_str());
  std::exit(usage_exit_code);
}

std::vector<std::string> parse_or_exit(const Command& command, const std::vector<std::string>& args,
                                       int usage_exit_code, bool stop_at_positional) {
  absl::StatusOr<ParsedArgs> parsed = parse_command(command, args, stop_at_positional);
  if (!parsed.ok()) exit_usage_error(command, std::string(parsed.status().message()), usage_exit_code);
  if (parsed->help) {
    print_help(command);
    std::exit(0);
  }
  return std::move(parsed->positional);
}

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
  return value_flag(name, [set = std::move(set)](const std::string& value) {
    set(value);
    return absl::OkStatus();
  });
}

Flag switch_flag(const std::string& name, std::function<void()> set) {
  return make_switch(name, [set = std::move(set)](const std::string&) {
    set();
    return absl::OkStatus();
  });
}

}  // namespace frost::cli
