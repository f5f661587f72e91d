#pragma once
// Typed fields: the one way frost reads a field into a struct (issue 54 item 1; docs/architecture.md,
// "Worked example: adding a config field, a flag or a request field"). A struct declares each field once,
// in a table of ConfigField rows: the key, the member (a member pointer or an accessor lambda), the range or
// the allowed values, the doc text; the default is the struct's own member initializer. The same table drives
// every front end and every by-product:
//   set(c, key, text) / set_all(c, {"k=v"})  — key=value (frost-bench --set, job specs' overrides),
//   set_json(c, json[, JsonRead])            — a JSON object (nested objects for dotted groups); typed, each
//                                              JSON type only where the field has it (job specs, artifacts),
//   apply(c, path, FieldInput)               — what a structured front end hands over (frostd's YAML,
//                                              server/server_config.cc: find() / children() / is_group()),
//   apply_as(c, path, FieldInput, label)     — the same, messages naming the field as `label` (a flag:
//                                              core/flags/table_flags.h),
//   check(c)                                 — every range on a struct built in code (Engine::create and the
//                                              server's validation call the engine's:
//                                              core/generate/engine_options.h),
//   to_json(c), keys(), help_entries()       — the dump, the known-key list, the --help / docs lines,
// so the parser, the known keys, the range checks, the dump and the help cannot drift apart.
//
// Messages come in two styles, chosen per table (the texts that existing tests check):
//   FieldStyle::kConfig, "<what> config: " + key (core configs read from key=value and JSON):
//     prototype config: unknown key 'nope' (known: a, b, c); did you mean 'nop'?
//     prototype config: K must be an integer, got 'abc'
//     prototype config: lr must be > 0, got -1            ("must be in [0, 1]", "must be in (0, 1)", ">= 1")
//     prototype config: probe must be 'ridge' or 'none', got 'lasso'
//   FieldStyle::kPath, "<prefix.>path: " (frostd's YAML config and the engine's check()):
//     engine.max_running: must be in [1, 65536], got 0
//     engine.max_running: expected an integer, got "four"
//     engine.kv_codec: unknown value "int3" (expected fp32|fp16|...)
// Cross-field rules (T >= K, max_batch_tokens >= max_running) stay in each struct's validate function.
//
// Groups: group<C, S>("tls", accessor, fields of S) lists S's fields under "tls.<key>" in C's table, so a
// nested struct is declared once and read as a YAML mapping, a JSON object or dotted key=value keys.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/common/config_range.h"
#include "core/common/number_text.h"

namespace frost {

// A field's value as the dump writes it (the JSON type follows the member's type).
using ConfigValue = std::variant<int64_t, uint64_t, double, bool, std::string>;

// What a field holds: front ends use it to write the dump (a YAML string is quoted, an enum name is not).
enum class FieldKind { kInt, kNumber, kBool, kString, kEnum, kBytes, kCustom };

// A value as a front end hands it to a field.
struct FieldInput {
  enum class Form {
    kText,    // text of any type: key=value, argv, a plain YAML scalar, a JSON number or boolean
    kString,  // a string and only a string: a quoted YAML scalar (numbers and booleans refuse it)
    kOther,   // not a scalar (a list, a mapping, null): only `shown` says what it was
    kNumber,  // a number or boolean and only that: a typed JSON reader's (strings refuse it)
  };
  // Whether the text may be read as a number or a boolean.
  bool scalar() const { return form == Form::kText || form == Form::kNumber; }
  Form form = Form::kText;
  std::string text;
  std::string shown;  // how kPath messages show the value ("\"four\"", "a sequence"); "" = "\"text\""

  static FieldInput of(std::string text, Form form = Form::kText) {
    FieldInput in;
    in.form = form;
    in.text = std::move(text);
    return in;
  }
};

// Why a value was refused; the table's style turns it into the message.
struct FieldProblem {
  enum class Kind {
    kType,    // text: what was expected ("an integer", "true or false")
    kRange,   // text: ConfigRange::describe(); got: the number
    kChoice,  // choices: the allowed names
    kWhy,     // text: the reason ("must not be empty")
  };
  Kind kind = Kind::kWhy;
  std::string text;
  std::vector<std::string> choices;
  std::string got;          // the value as text
  bool got_string = false;  // check(): `got` is a string member's value (quoted in messages)
};
using FieldCheck = std::optional<FieldProblem>;

template <typename C>
struct ConfigField {
  std::string name;
  FieldKind kind = FieldKind::kCustom;
  std::string value_name;  // the help's placeholder: "N", "X", "BYTES", "TEXT", "true|false", "a|b"
  std::string range;       // the help's constraint ("must be in [1, 4096]"; "" for none)
  std::string help;        // the doc text
  std::function<FieldCheck(C&, const FieldInput&)> parse;
  std::function<FieldCheck(const C&)> check;  // the member's current value against the range
  std::function<ConfigValue(const C&)> get;
  // Only an optional member's (optional_field): whether it holds a value (unset ones are left out of the
  // dump) and how to unset it (a typed JSON reader's null).
  std::function<bool(const C&)> present;
  std::function<void(C&)> clear;

  // int_field<C>("max_running", &C::max_running, R::in(1, 65536)).doc("sequences in one step")
  ConfigField doc(std::string text) && {
    help = std::move(text);
    return std::move(*this);
  }
};

namespace config_fields_internal {

// A member pointer or a callable returning a reference: both become `auto& (auto& c)`.
template <typename Access>
auto accessor(Access a) {
  if constexpr (std::is_member_object_pointer_v<Access>) {
    return [a](auto& c) -> auto& { return c.*a; };
  } else {
    return a;
  }
}

template <typename T>
std::string number_text(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return shortest_float_text(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    return shortest_number_text(v);
  } else {
    return std::to_string(v);
  }
}

inline std::string quoted(const std::string& s) { return absl::StrCat("'", s, "'"); }
inline std::string dquoted(const std::string& s) { return absl::StrCat("\"", s, "\""); }

inline FieldProblem type_problem(std::string expected, const FieldInput& in) {
  return FieldProblem{FieldProblem::Kind::kType, std::move(expected), {}, in.text};
}
inline FieldProblem range_problem(const ConfigRange& r, std::string got, const std::string& unit = "") {
  return FieldProblem{FieldProblem::Kind::kRange, r.describe(unit), {}, std::move(got)};
}

// "'a', 'b' or 'c'"
inline std::string or_list(const std::vector<std::string>& names) {
  std::vector<std::string> q;
  for (const std::string& s : names) q.push_back(quoted(s));
  if (q.empty()) return "";
  const std::string last = q.back();
  q.pop_back();
  return q.empty() ? last : absl::StrCat(absl::StrJoin(q, ", "), " or ", last);
}

// Levenshtein distance, for "did you mean".
inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace config_fields_internal

// The known key closest to `key` within two edits (and fewer than its length), or "".
inline std::string closest_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;
  for (const std::string& k : known) {
    const size_t d = config_fields_internal::edit_distance(key, k);
    if (d < best_d && d < key.size()) {
      best = k;
      best_d = d;
    }
  }
  return best;
}

// An integer member (any integral type) in `range`.
template <typename C, typename Access>
ConfigField<C> int_field(std::string name, Access access, ConfigRange range = ConfigRange::any()) {
  using namespace config_fields_internal;
  auto get = accessor(access);
  using T = std::decay_t<decltype(get(std::declval<C&>()))>;
  static_assert(std::is_integral_v<T>, "int_field: not an integer member");
  using Wide = std::conditional_t<std::is_unsigned_v<T>, uint64_t, int64_t>;
  const std::string expected = std::is_unsigned_v<T> ? "an unsigned integer" : "an integer";
  ConfigField<C> f;
  f.name = std::move(name);
  f.kind = FieldKind::kInt;
  f.value_name = "N";
  f.range = range.describe();
  f.parse = [get, range, expected](C& c, const FieldInput& in) -> FieldCheck {
    Wide v = 0;
    if (!in.scalar() || !absl::SimpleAtoi(in.text, &v)) return type_problem(expected, in);
    if (!range.contains(static_cast<double>(v))) return range_problem(range, in.text);
    if (v < static_cast<Wide>(std::numeric_limits<T>::min()) ||
        v > static_cast<Wide>(std::numeric_limits<T>::max()))
      return type_problem(expected, in);
    get(c) = static_cast<T>(v);
    return std::nullopt;
  };
  f.check = [get, range](const C& c) -> FieldCheck {
    const T v = get(c);
    if (range.contains(static_cast<double>(v))) return std::nullopt;
    return range_problem(range, number_text(v));
  };
  f.get = [get](const C& c) -> ConfigValue {
    if constexpr (std::is_unsigned_v<T>) {
      return static_cast<uint64_t>(get(c));
    } else {
      return static_cast<int64_t>(get(c));
    }
  };
  return f;
}

// A byte size (int64_t): an integer, optionally followed by KiB, MiB, GiB or TiB (no space), in `range`.
template <typename C, typename Access>
ConfigField<C> bytes_field(std::string name, Access access, ConfigRange range) {
  using namespace config_fields_internal;
  auto get = accessor(access);
  ConfigField<C> f;
  f.name = std::move(name);
  f.kind = FieldKind::kBytes;
  f.value_name = "BYTES";
  f.range = range.describe("bytes");
  f.parse = [get, range](C& c, const FieldInput& in) -> FieldCheck {
    const std::string& text = in.text;
    std::string digits = in.scalar() ? text : "";
    int shift = 0;
    for (const auto& [suffix, sh] :
         {std::pair{"KiB", 10}, std::pair{"MiB", 20}, std::pair{"GiB", 30}, std::pair{"TiB", 40}}) {
      if (!digits.empty() && absl::EndsWith(text, suffix)) {
        digits = text.substr(0, text.size() - 3);
        shift = sh;
      }
    }
    int64_t v = 0;
    if (digits.empty() || !absl::SimpleAtoi(digits, &v) || v < 0 ||
        (shift > 0 && v > (std::numeric_limits<int64_t>::max() >> shift)))
      return type_problem("a byte size (an integer, optionally with KiB, MiB, GiB or TiB)", in);
    v <<= shift;
    if (!range.contains(static_cast<double>(v))) return range_problem(range, std::to_string(v), "bytes");
    get(c) = v;
    return std::nullopt;
  };
  f.check = [get, range](const C& c) -> FieldCheck {
    const int64_t v = get(c);
    if (range.contains(static_cast<double>(v))) return std::nullopt;
    return range_problem(range, std::to_string(v), "bytes");
  };
  f.get = [get](const C& c) -> ConfigValue { return static_cast<int64_t>(get(c)); };
  return f;
}

// A finite floating-point member in `range`. A float member is shown by its own shortest text (0.8, not
// the double it widens to, 0.800000011920929): in the dump, the help's default and messages.
template <typename C, typename Access>
ConfigField<C> number_field(std::string name, Access access, ConfigRange range = ConfigRange::any()) {
  using namespace config_fields_internal;
  auto get = accessor(access);
  using T = std::decay_t<decltype(get(std::declval<C&>()))>;
  static_assert(std::is_floating_point_v<T>, "number_field: not a floating-point member");
  ConfigField<C> f;
  f.name = std::move(name);
  f.kind = FieldKind::kNumber;
  f.value_name = "X";
  f.range = range.describe();
  f.parse = [get, range](C& c, const FieldInput& in) -> FieldCheck {
    double v = 0;
    if (!in.scalar() || !absl::SimpleAtod(in.text, &v) || !std::isfinite(v) ||
        std::fabs(v) > std::numeric_limits<T>::max())
      return type_problem("a finite number", in);
    if (!range.contains(v)) return range_problem(range, in.text);
    get(c) = static_cast<T>(v);
    return std::nullopt;
  };
  f.check = [get, range](const C& c) -> FieldCheck {
    const double v = get(c);
    if (!std::isfinite(v))
      return FieldProblem{FieldProblem::Kind::kType, "a finite number", {}, number_text(get(c))};
    if (range.contains(v)) return std::nullopt;
    return range_problem(range, number_text(get(c)));
  };
  f.get = [get](const C& c) -> ConfigValue {
    double v = get(c);
    if constexpr (std::is_same_v<T, float>) absl::SimpleAtod(shortest_float_text(get(c)), &v);
    return v;
  };
  return f;
}

// A bool member: true or false (any case).
template <typename C, typename Access>
ConfigField<C> bool_field(std::string name, Access access) {
  using namespace config_fields_internal;
  auto get = accessor(access);
  ConfigField<C> f;
  f.name = std::move(name);
  f.kind = FieldKind::kBool;
  f.value_name = "true|false";
  f.parse = [get](C& c, const FieldInput& in) -> FieldCheck {
    const std::string s = in.scalar() ? absl::AsciiStrToLower(in.text) : "";
    if (s != "true" && s != "false") return type_problem("true or false", in);
    get(c) = s == "true";
    return std::nullopt;
  };
  f.check = [](const C&) -> FieldCheck { return std::nullopt; };
  f.get = [get](const C& c) -> ConfigValue { return static_cast<bool>(get(c)); };
  return f;
}

// A string member (any scalar, quoted or not: `listen: 8080` is the string "8080"); with `choices`, one of
// them; non_empty refuses "".
template <typename C, typename Access>
ConfigField<C> string_field(std::string name, Access access, std::vector<std::string> choices = {},
                            bool non_empty = false) {
  using namespace config_fields_internal;
  auto get = accessor(access);
  auto problem = [choices, non_empty](const std::string& v) -> FieldCheck {
    if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end())
      return FieldProblem{FieldProblem::Kind::kChoice, "", choices, v, true};
    if (non_empty && v.empty())
      return FieldProblem{FieldProblem::Kind::kWhy, "must not be empty", {}, v, true};
    return std::nullopt;
  };
  ConfigField<C> f;
  f.name = std::move(name);
  f.kind = FieldKind::kString;
  f.value_name = choices.empty() ? "TEXT" : absl::StrJoin(choices, "|");
  if (non_empty) f.range = "must not be empty";
  f.parse = [get, problem](C& c, const FieldInput& in) -> FieldCheck {
    if (in.form == FieldInput::Form::kOther || in.form == FieldInput::Form::kNumber)
      return type_problem("a string", in);
    if (FieldCheck p = problem(in.text)) return p;
    get(c) = in.text;
    return std::nullopt;
  };
  f.check = [get, problem](const C& c) -> FieldCheck { return problem(get(c)); };
  f.get = [get](const C& c) -> ConfigValue { return std::string(get(c)); };
  return f;
}

// An enum member written by name: `names` maps each name to its value (the first name of a value is the one
// the dump writes). A value without a name (a request's "server" in the engine's options) fails check().
template <typename C, typename Access, typename E>
ConfigField<C> enum_field(std::string name, Access access, std::vector<std::pair<std::string, E>> names) {
  using namespace config_fields_internal;
  auto get = accessor(access);
  std::vector<std::string> choices;
  for (const auto& [n, e] : names) choices.push_back(n);
  ConfigField<C> f;
  f.name = std::move(name);
  f.kind = FieldKind::kEnum;
  f.value_name = absl::StrJoin(choices, "|");
  f.parse = [get, names, choices](C& c, const FieldInput& in) -> FieldCheck {
    if (in.form != FieldInput::Form::kOther) {
      for (const auto& [n, e] : names) {
        if (n == in.text) {
          get(c) = e;
          return std::nullopt;
        }
      }
    }
    return FieldProblem{FieldProblem::Kind::kChoice, "", choices, in.text};
  };
  f.check = [get, names, choices](const C& c) -> FieldCheck {
    for (const auto& [n, e] : names)
      if (e == get(c)) return std::nullopt;
    return FieldProblem{
        FieldProblem::Kind::kWhy, absl::StrCat("must be one of ", absl::StrJoin(choices, "|")), {}, ""};
  };
  f.get = [get, names](const C& c) -> ConfigValue {
    for (const auto& [n, e] : names)
      if (e == get(c)) return n;
    return std::string("?");
  };
  return f;
}

// Anything else (a spec with its own parser): set returns "" or why (the value is added to it); to_string
// gives the dump's string.
template <typename C>
ConfigField<C> custom_field(std::string name, std::function<std::string(C&, const std::string&)> set,
                            std::function<std::string(const C&)> to_string, std::string value_name = "SPEC") {
  ConfigField<C> f;
  f.name = std::move(name);
  f.kind = FieldKind::kCustom;
  f.value_name = std::move(value_name);
  f.parse = [set = std::move(set)](C& c, const FieldInput& in) -> FieldCheck {
    if (in.form == FieldInput::Form::kOther || in.form == FieldInput::Form::kNumber)
      return config_fields_internal::type_problem("a string", in);
    std::string why = set(c, in.text);
    if (why.empty()) return std::nullopt;
    return FieldProblem{FieldProblem::Kind::kWhy, std::move(why), {}, in.text, true};
  };
  f.check = [](const C&) -> FieldCheck { return std::nullopt; };
  f.get = [to_string = std::move(to_string)](const C& c) -> ConfigValue { return to_string(c); };
  return f;
}

// A std::optional<T> member: `inner` is T's field, declared over T itself with the accessor self(), e.g.
//   optional_field<C>(&C::holdout_fraction, number_field<double>("holdout_fraction", self(), R::in(0, 1)))
// Unset is the default: check() passes it, to_json() leaves it out, a typed JSON null unsets it.
inline auto self() {
  return [](auto& v) -> auto& { return v; };
}
template <typename C, typename T, typename Access>
ConfigField<C> optional_field(Access access, ConfigField<T> inner) {
  auto get = config_fields_internal::accessor(access);
  ConfigField<C> f;
  f.name = std::move(inner.name);
  f.kind = inner.kind;
  f.value_name = std::move(inner.value_name);
  f.range = std::move(inner.range);
  f.help = std::move(inner.help);
  f.parse = [get, p = std::move(inner.parse)](C& c, const FieldInput& in) -> FieldCheck {
    T v = get(c).value_or(T{});
    if (FieldCheck problem = p(v, in)) return problem;
    get(c) = std::move(v);
    return std::nullopt;
  };
  f.check = [get, k = std::move(inner.check)](const C& c) -> FieldCheck {
    return get(c).has_value() ? k(*get(c)) : std::nullopt;
  };
  f.get = [get, g = std::move(inner.get)](const C& c) { return get(c).has_value() ? g(*get(c)) : g(T{}); };
  f.present = [get](const C& c) { return get(c).has_value(); };
  f.clear = [get](C& c) { get(c).reset(); };
  return f;
}

// S's fields inside C, under "<name>.<key>" ("" = no prefix: a base class's fields, e.g. the server's
// engine section over EngineOptions). `access` is a member pointer or a lambda `(auto& c) -> auto&`.
template <typename C, typename S, typename Access>
std::vector<ConfigField<C>> group(const std::string& name, Access access,
                                  std::vector<ConfigField<S>> fields) {
  auto get = config_fields_internal::accessor(access);
  std::vector<ConfigField<C>> out;
  for (ConfigField<S>& sub : fields) {
    ConfigField<C> f;
    f.name = name.empty() ? sub.name : absl::StrCat(name, ".", sub.name);
    f.kind = sub.kind;
    f.value_name = std::move(sub.value_name);
    f.range = std::move(sub.range);
    f.help = std::move(sub.help);
    f.parse = [get, p = std::move(sub.parse)](C& c, const FieldInput& in) { return p(get(c), in); };
    f.check = [get, k = std::move(sub.check)](const C& c) { return k(get(c)); };
    f.get = [get, g = std::move(sub.get)](const C& c) { return g(get(c)); };
    if (sub.present) f.present = [get, h = std::move(sub.present)](const C& c) { return h(get(c)); };
    if (sub.clear) f.clear = [get, u = std::move(sub.clear)](C& c) { u(get(c)); };
    out.push_back(std::move(f));
  }
  return out;
}

// An accessor to a base class B of the struct (for group("", base_of<B>(), ...)).
template <typename B>
auto base_of() {
  return [](auto& c) -> auto& {
    if constexpr (std::is_const_v<std::remove_reference_t<decltype(c)>>) {
      return static_cast<const B&>(c);
    } else {
      return static_cast<B&>(c);
    }
  };
}

// Concatenates field lists (a table built of groups).
template <typename C>
std::vector<ConfigField<C>> fields_of(std::initializer_list<std::vector<ConfigField<C>>> lists) {
  std::vector<ConfigField<C>> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

enum class FieldStyle { kConfig, kPath };

// One line of generated help: "name=VALUE  doc (must be in [1, 4]; default 32)".
struct FieldHelp {
  std::string name, value_name, text;
};

// How set_json reads a JSON object.
struct JsonRead {
  // Each JSON type only where the field's type has it: a string only for a string field, a number or a
  // boolean only for the others, null only to unset an optional field; messages show the JSON value (7,
  // "yes", {"name":"m"}). Off: any scalar is read as text.
  bool typed = false;
  // Keys the caller reads itself (a list of rows, a free map): skipped, and listed among the known keys.
  std::vector<std::string> by_hand;
  // Keys the table does not know are skipped (a file with fields this reader does not use).
  bool ignore_unknown = false;
};

template <typename C>
class ConfigTable {
 public:
  // kConfig: `what` names the config in messages ("prototype", "kv_repair", "kvsplice"). kPath: `what` is the
  // prefix of every path ("engine" → "engine.max_running: ..."; "" → the names as they are).
  ConfigTable(std::string what, std::vector<ConfigField<C>> fields, FieldStyle style = FieldStyle::kConfig)
      : what_(std::move(what)), fields_(std::move(fields)), style_(style) {}

  const std::string& what() const { return what_; }
  const std::vector<ConfigField<C>>& fields() const { return fields_; }

  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const ConfigField<C>& f : fields_) k.push_back(f.name);
    return k;
  }

  const ConfigField<C>* find(const std::string& name) const {
    for (const ConfigField<C>& f : fields_)
      if (f.name == name) return &f;
    return nullptr;
  }
  // Whether `prefix` names a group (some field is "<prefix>.<key>").
  bool is_group(const std::string& prefix) const {
    for (const ConfigField<C>& f : fields_)
      if (absl::StartsWith(f.name, prefix) && f.name.size() > prefix.size() && f.name[prefix.size()] == '.')
        return true;
    return false;
  }
  // The distinct keys one level below `prefix` ("" = the top), in table order.
  std::vector<std::string> children(const std::string& prefix) const {
    std::vector<std::string> out;
    const std::string start = prefix.empty() ? "" : absl::StrCat(prefix, ".");
    for (const ConfigField<C>& f : fields_) {
      if (!absl::StartsWith(f.name, start)) continue;
      const std::string rest = f.name.substr(start.size());
      const std::string head = rest.substr(0, rest.find('.'));
      if (std::find(out.begin(), out.end(), head) == out.end()) out.push_back(head);
    }
    return out;
  }

  // INVALID_ARGUMENT "<what> config: <why>" (kConfig) or "<why>" (kPath).
  absl::Status error(const std::string& why) const {
    if (style_ == FieldStyle::kPath) return absl::InvalidArgumentError(why);
    return absl::InvalidArgumentError(absl::StrCat(what_, " config: ", why));
  }
  // INVALID_ARGUMENT for a check a validate function adds: "<what> config: <key> <why>, got <value>" or
  // "<prefix.key>: <why>, got <value>".
  absl::Status field_error(const std::string& key, const std::string& value, const std::string& why) const {
    if (style_ == FieldStyle::kPath) return error(absl::StrCat(path(key), ": ", why, ", got ", value));
    return error(absl::StrCat(key, " ", why, ", got ", value));
  }
  // The unknown key `key` (a full path in kPath style) among `known` (the keys at its level).
  absl::Status unknown_key(const std::string& key, const std::vector<std::string>& known) const {
    const std::string leaf = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
    const std::string near = closest_key(leaf, known);
    const std::string hint = near.empty() ? "" : absl::StrCat("; did you mean '", near, "'?");
    if (style_ == FieldStyle::kPath)
      return error(absl::StrCat("unknown key '", path(key), "' (expected one of ", absl::StrJoin(known, "|"),
                                ")", hint));
    return error(absl::StrCat("unknown key ", config_fields_internal::quoted(key),
                              " (known: ", absl::StrJoin(known, ", "), ")", hint));
  }

  // Reads `in` into the field `name`: unknown names and refused values are INVALID_ARGUMENT in the style.
  absl::Status apply(C& c, const std::string& name, const FieldInput& in) const {
    const ConfigField<C>* f = find(name);
    if (f == nullptr) return unknown_key(name, keys());
    if (FieldCheck p = f->parse(c, in)) return render(name, *p, &in);
    return absl::OkStatus();
  }

  // apply() for a front end that names the field its own way (a flag, core/flags/table_flags.h): messages
  // are "<label>: <why>" in the kPath wording whatever the table's style ("--top-k: must be >= 0, got -1").
  absl::Status apply_as(C& c, const std::string& name, const FieldInput& in, const std::string& label) const {
    const ConfigField<C>* f = find(name);
    if (f == nullptr) return unknown_key(name, keys());
    if (FieldCheck p = f->parse(c, in)) return render(name, *p, &in, &label);
    return absl::OkStatus();
  }

  absl::Status set(C& c, const std::string& key, const std::string& value) const {
    return apply(c, key, FieldInput::of(value));
  }

  // `key=value` strings, in order.
  absl::Status set_all(C& c, const std::vector<std::string>& key_values) const {
    for (const std::string& kv : key_values) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        return error(absl::StrCat(config_fields_internal::quoted(kv), " is not key=value"));
      if (absl::Status s = set(c, kv.substr(0, eq), kv.substr(eq + 1)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // A JSON object of keys to strings, numbers or booleans (what to_json writes; a group's fields as a nested
  // object or dotted keys), applied through set(): any JSON type is read as text ("8" and 8 both set an int).
  absl::Status set_json(C& c, const nlohmann::json& j, const std::string& prefix = "") const {
    return read_json(c, j, prefix, JsonRead{});
  }
  // The same, read as `how` says (typed: a file or a journal that to_json wrote, whose types are the
  // fields').
  absl::Status set_json(C& c, const nlohmann::json& j, const JsonRead& how) const {
    return read_json(c, j, "", how);
  }

  // Every field's range, in table order; the first one out of range is the error.
  absl::Status check(const C& c) const {
    for (const ConfigField<C>& f : fields_)
      if (absl::Status s = check_field(c, f); !s.ok()) return s;
    return absl::OkStatus();
  }
  // One field's (f is one of fields(): a validate function that walks the rows itself).
  absl::Status check_field(const C& c, const ConfigField<C>& f) const {
    if (FieldCheck p = f.check(c)) return render(f.name, *p, nullptr);
    return absl::OkStatus();
  }

  // nlohmann::json (keys sorted) or nlohmann::ordered_json (table order); a group is a nested object.
  template <typename Json = nlohmann::ordered_json>
  Json to_json(const C& c) const {
    Json j = Json::object();
    for (const ConfigField<C>& f : fields_) {
      if (f.present && !f.present(c)) continue;
      Json* at = &j;
      size_t start = 0;
      for (size_t dot = f.name.find('.'); dot != std::string::npos; dot = f.name.find('.', start)) {
        at = &(*at)[f.name.substr(start, dot - start)];
        start = dot + 1;
      }
      (*at)[f.name.substr(start)] = std::visit([](const auto& v) { return Json(v); }, f.get(c));
    }
    return j;
  }

  // Field f's value in c as help texts show it: a string quoted, a bool true / false, a number shortest.
  static std::string value_text(const ConfigField<C>& f, const C& c) {
    return std::visit(
        [](const auto& v) -> std::string {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::string>) {
            return config_fields_internal::quoted(v);
          } else if constexpr (std::is_same_v<V, bool>) {
            return v ? "true" : "false";
          } else {
            return config_fields_internal::number_text(v);
          }
        },
        f.get(c));
  }

  // The help of every field: its doc, its range or choices and its default (a default-constructed C's value).
  std::vector<FieldHelp> help_entries() const {
    std::vector<FieldHelp> out;
    const C defaults{};
    for (const ConfigField<C>& f : fields_) {
      std::vector<std::string> notes;
      if (!f.range.empty()) notes.push_back(f.range);
      notes.push_back(f.present && !f.present(defaults) ? "default unset"
                                                        : absl::StrCat("default ", value_text(f, defaults)));
      const std::string text = f.help.empty() ? absl::StrJoin(notes, "; ")
                                              : absl::StrCat(f.help, " (", absl::StrJoin(notes, "; "), ")");
      out.push_back({f.name, f.value_name, text});
    }
    return out;
  }

 private:
  absl::Status read_json(C& c, const nlohmann::json& j, const std::string& prefix,
                         const JsonRead& how) const {
    if (!j.is_object())
      return error(prefix.empty() ? "not a JSON object" : absl::StrCat(prefix, " is not a JSON object"));
    for (const auto& [key, v] : j.items()) {
      const std::string name = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      if (std::find(how.by_hand.begin(), how.by_hand.end(), name) != how.by_hand.end()) continue;
      const ConfigField<C>* f = find(name);
      if (v.is_object() && is_group(name)) {
        if (absl::Status s = read_json(c, v, name, how); !s.ok()) return s;
        continue;
      }
      if (f == nullptr && how.ignore_unknown) continue;
      if (f == nullptr && how.typed) {
        std::vector<std::string> known = keys();
        known.insert(known.end(), how.by_hand.begin(), how.by_hand.end());
        return unknown_key(name, known);
      }
      FieldInput in;
      if (v.is_string()) {
        in = FieldInput::of(v.template get<std::string>(),
                            how.typed ? FieldInput::Form::kString : FieldInput::Form::kText);
      } else if (v.is_boolean()) {
        in = FieldInput::of(v.template get<bool>() ? "true" : "false");
      } else if (v.is_number_float()) {
        in = FieldInput::of(absl::StrFormat("%.17g", v.template get<double>()));
      } else if (v.is_number()) {
        in = FieldInput::of(v.dump());
      } else if (!how.typed) {
        return error(absl::StrCat(name, " has an unsupported JSON type: ", v.dump()));
      } else if (v.is_null() && f->clear) {
        f->clear(c);  // an optional field's null: unset
        continue;
      } else {
        in = FieldInput::of("", FieldInput::Form::kOther);
      }
      if (how.typed) {
        if (in.form == FieldInput::Form::kText) in.form = FieldInput::Form::kNumber;
        // The value as the file spells it, cut short (a mistyped field may hold a whole object).
        in.shown = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        if (in.shown.size() > 60) in.shown = absl::StrCat(in.shown.substr(0, 57), "...");
      }
      if (absl::Status s = apply(c, name, in); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  std::string path(const std::string& name) const {
    return what_.empty() ? name : absl::StrCat(what_, ".", name);
  }

  // The message of `p` for field `name`; `in` is what was given (nullptr: from check()).
  absl::Status render(const std::string& name, const FieldProblem& p, const FieldInput* in,
                      const std::string* label = nullptr) const {
    using config_fields_internal::dquoted;
    using config_fields_internal::quoted;
    using K = FieldProblem::Kind;
    if (style_ == FieldStyle::kConfig && label == nullptr) {
      std::string why;
      switch (p.kind) {
        case K::kType:
          why = absl::StrCat("must be ", p.text, ", got ", quoted(p.got));
          break;
        case K::kRange:
          why = absl::StrCat(p.text, ", got ", p.got);
          break;
        case K::kChoice:
          why = absl::StrCat("must be ", config_fields_internal::or_list(p.choices), ", got ", quoted(p.got));
          break;
        case K::kWhy:
          why = in || p.got_string ? absl::StrCat(p.text, ", got ", quoted(p.got)) : p.text;
          break;
      }
      return error(absl::StrCat(name, " ", why));
    }
    // kPath: the value as the front end shows it.
    const std::string shown = in && !in->shown.empty() ? in->shown
                              : (in || p.got_string)   ? dquoted(p.got)
                                                       : p.got;
    std::string why;
    switch (p.kind) {
      case K::kType:
        why = absl::StrCat("expected ", p.text, ", got ", shown);
        break;
      case K::kRange:
        why = absl::StrCat(p.text, ", got ", p.got);
        break;
      case K::kChoice:
        why = in && in->form == FieldInput::Form::kOther
                  ? absl::StrCat("expected one of ", absl::StrJoin(p.choices, "|"), ", got ", shown)
                  : absl::StrCat("unknown value ", shown, " (expected ", absl::StrJoin(p.choices, "|"), ")");
        break;
      case K::kWhy:
        why = p.got.empty() && !in ? p.text : absl::StrCat(p.text, ", got ", shown);
        break;
    }
    if (label != nullptr) return absl::InvalidArgumentError(absl::StrCat(*label, ": ", why));
    return error(absl::StrCat(path(name), ": ", why));
  }

  std::string what_;
  std::vector<ConfigField<C>> fields_;
  FieldStyle style_;
};

}  // namespace frost
