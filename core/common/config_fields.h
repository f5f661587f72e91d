#pragma once
// ConfigTable<C>: one field table per config struct. Each row names a key and says how its string form
// (frost-bench --set, job specs, JSON) becomes the member, which range the value must lie in, and how the
// member is written to JSON. The one table drives
//   set(c, key, value)  — parse + range check; INVALID_ARGUMENT naming the key, the value and the range;
//                         an unknown key lists the known ones (from the table, not a hand-kept list),
//   check(c)            — every field's range on a struct built in code (validate functions call it),
//   to_json(c)          — the dump, in table order,
// so the parser, the known-key list, the range checks and the dump cannot drift apart.
//
// Messages (one format for every core config):
//   <what> config: unknown key 'nope' (known: a, b, c)
//   <what> config: K must be an integer, got 'abc'
//   <what> config: lr must be > 0, got -1           (and "must be in [0, 1]", "must be in (0, 1)", ">= 1")
//   <what> config: probe must be 'ridge' or 'none', got 'lasso'
// Cross-field rules (T >= K, rank <= the model's head_dim) stay in each struct's validate function.
//
// Design: rows hold std::function closures over an accessor (a member pointer or a lambda returning a
// reference, for nested members such as KvRepairConfig::repair.rank), so a row is written once and the
// same accessor serves the const (check, dump) and the mutable (set) side.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace frost {

// The shortest decimal that reads back as `v`; whole numbers without exponent (65536, not 65536.0 or
// 6.5536e+04).
inline std::string config_number_text(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  for (int precision = 1; precision < 17; ++precision) {
    const std::string s = absl::StrFormat("%.*g", precision, v);
    double back = 0;
    if (absl::SimpleAtod(s, &back) && back == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

// A closed or open interval of numbers; an infinite end is no bound.
struct ConfigRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  static ConfigRange any() { return {}; }
  static ConfigRange at_least(double lo) {
    return {lo, std::numeric_limits<double>::infinity(), false, false};
  }
  static ConfigRange above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false}; }
  static ConfigRange in(double lo, double hi) { return {lo, hi, false, false}; }
  // (lo, hi]
  static ConfigRange in_lo_open(double lo, double hi) { return {lo, hi, true, false}; }
  static ConfigRange open(double lo, double hi) { return {lo, hi, true, true}; }

  bool contains(double v) const {
    if (std::isnan(v)) return false;
    if (lo_open ? !(v > lo) : !(v >= lo)) return false;
    if (hi_open ? !(v < hi) : !(v <= hi)) return false;
    return true;
  }
  // "must be >= 1", "must be > 0", "must be in [0, 1]", "must be in (0, 1)"; "" for no bound.
  std::string describe() const {
    const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
    if (has_lo && has_hi)
      return absl::StrCat("must be in ", lo_open ? "(" : "[", config_number_text(lo), ", ",
                          config_number_text(hi), hi_open ? ")" : "]");
    if (has_lo) return absl::StrCat("must be ", lo_open ? "> " : ">= ", config_number_text(lo));
    if (has_hi) return absl::StrCat("must be ", hi_open ? "< " : "<= ", config_number_text(hi));
    return "";
  }
};

// A field's value as the dump writes it (the JSON type follows the member's type).
using ConfigValue = std::variant<int64_t, uint64_t, double, bool, std::string>;

template <typename C>
struct ConfigField {
  std::string name;
  // Parses `value` into the member. Returns "" or why it was refused, with what was given ("must be an
  // integer, got 'x'", "must be in [0, 1], got 1.5"); the table adds the config name and the key.
  std::function<std::string(C&, const std::string& value)> set;
  // Why the member's current value is out of range ("" = fine, and for fields without a range).
  std::function<std::string(const C&)> check;
  std::function<ConfigValue(const C&)> get;
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
  if constexpr (std::is_floating_point_v<T>) {
    return config_number_text(v);
  } else {
    return std::to_string(v);
  }
}

inline std::string quoted(const std::string& s) { return absl::StrCat("'", s, "'"); }

}  // namespace config_fields_internal

// An integer member (any integral type) in `range`.
template <typename C, typename Access>
ConfigField<C> int_field(std::string name, Access access, ConfigRange range = ConfigRange::any()) {
  auto get = config_fields_internal::accessor(access);
  using T = std::decay_t<decltype(get(std::declval<C&>()))>;
  static_assert(std::is_integral_v<T>, "int_field: not an integer member");
  ConfigField<C> f;
  f.name = std::move(name);
  f.set = [get, range](C& c, const std::string& value) -> std::string {
    T v = 0;
    if (!absl::SimpleAtoi(value, &v))
      return absl::StrCat(std::is_unsigned_v<T> ? "must be an unsigned integer" : "must be an integer",
                          ", got ", config_fields_internal::quoted(value));
    if (!range.contains(static_cast<double>(v))) return absl::StrCat(range.describe(), ", got ", value);
    get(c) = v;
    return "";
  };
  f.check = [get, range](const C& c) -> std::string {
    const T v = get(c);
    if (range.contains(static_cast<double>(v))) return "";
    return absl::StrCat(range.describe(), ", got ", config_fields_internal::number_text(v));
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

// A finite double member in `range`.
template <typename C, typename Access>
ConfigField<C> number_field(std::string name, Access access, ConfigRange range = ConfigRange::any()) {
  auto get = config_fields_internal::accessor(access);
  ConfigField<C> f;
  f.name = std::move(name);
  f.set = [get, range](C& c, const std::string& value) -> std::string {
    double v = 0;
    if (!absl::SimpleAtod(value, &v) || !std::isfinite(v))
      return absl::StrCat("must be a finite number, got ", config_fields_internal::quoted(value));
    if (!range.contains(v)) return absl::StrCat(range.describe(), ", got ", value);
    get(c) = v;
    return "";
  };
  f.check = [get, range](const C& c) -> std::string {
    const double v = get(c);
    if (!std::isfinite(v)) return absl::StrCat("must be a finite number, got ", v);
    if (range.contains(v)) return "";
    return absl::StrCat(range.describe(), ", got ", config_number_text(v));
  };
  f.get = [get](const C& c) -> ConfigValue { return static_cast<double>(get(c)); };
  return f;
}

// A string member; with `choices`, one of them ("must be 'a' or 'b'"); non_empty refuses "".
template <typename C, typename Access>
ConfigField<C> string_field(std::string name, Access access, std::vector<std::string> choices = {},
                            bool non_empty = false) {
  auto get = config_fields_internal::accessor(access);
  std::string why;
  if (!choices.empty()) {
    std::vector<std::string> q;
    for (const std::string& s : choices) q.push_back(config_fields_internal::quoted(s));
    const std::string last = q.back();
    q.pop_back();
    why = q.empty() ? absl::StrCat("must be ", last)
                    : absl::StrCat("must be ", absl::StrJoin(q, ", "), " or ", last);
  } else if (non_empty) {
    why = "must not be empty";
  }
  auto ok = [choices, non_empty](const std::string& v) {
    if (non_empty && v.empty()) return false;
    if (choices.empty()) return true;
    for (const std::string& s : choices)
      if (s == v) return true;
    return false;
  };
  ConfigField<C> f;
  f.name = std::move(name);
  f.set = [get, ok, why](C& c, const std::string& value) -> std::string {
    if (!ok(value)) return absl::StrCat(why, ", got ", config_fields_internal::quoted(value));
    get(c) = value;
    return "";
  };
  f.check = [get, ok, why](const C& c) -> std::string {
    if (ok(get(c))) return "";
    return absl::StrCat(why, ", got ", config_fields_internal::quoted(get(c)));
  };
  f.get = [get](const C& c) -> ConfigValue { return std::string(get(c)); };
  return f;
}

// An enum member written by name: `names` maps each name to its value (the first name of a value is the one
// the dump writes).
template <typename C, typename Access, typename E>
ConfigField<C> enum_field(std::string name, Access access, std::vector<std::pair<std::string, E>> names) {
  auto get = config_fields_internal::accessor(access);
  std::vector<std::string> q;
  for (const auto& [n, e] : names) q.push_back(config_fields_internal::quoted(n));
  const std::string last = q.back();
  q.pop_back();
  const std::string why = q.empty() ? absl::StrCat("must be ", last)
                                    : absl::StrCat("must be ", absl::StrJoin(q, ", "), " or ", last);
  ConfigField<C> f;
  f.name = std::move(name);
  f.set = [get, names, why](C& c, const std::string& value) -> std::string {
    for (const auto& [n, e] : names) {
      if (n == value) {
        get(c) = e;
        return "";
      }
    }
    return absl::StrCat(why, ", got ", config_fields_internal::quoted(value));
  };
  f.check = [](const C&) -> std::string { return ""; };
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
                            std::function<std::string(const C&)> to_string) {
  ConfigField<C> f;
  f.name = std::move(name);
  f.set = [set = std::move(set)](C& c, const std::string& value) -> std::string {
    const std::string why = set(c, value);
    return why.empty() ? why : absl::StrCat(why, ", got ", config_fields_internal::quoted(value));
  };
  f.check = [](const C&) -> std::string { return ""; };
  f.get = [to_string = std::move(to_string)](const C& c) -> ConfigValue { return to_string(c); };
  return f;
}

template <typename C>
class ConfigTable {
 public:
  // `what` names the config in messages ("prototype", "kv_repair", "kvsplice").
  ConfigTable(std::string what, std::vector<ConfigField<C>> fields)
      : what_(std::move(what)), fields_(std::move(fields)) {}

  const std::string& what() const { return what_; }
  const std::vector<ConfigField<C>>& fields() const { return fields_; }

  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const ConfigField<C>& f : fields_) k.push_back(f.name);
    return k;
  }

  // INVALID_ARGUMENT "<what> config: <why>".
  absl::Status error(const std::string& why) const {
    return absl::InvalidArgumentError(absl::StrCat(what_, " config: ", why));
  }
  // INVALID_ARGUMENT "<what> config: <key> <why>, got <value>" (for the checks a validate function adds).
  absl::Status field_error(const std::string& key, const std::string& value, const std::string& why) const {
    return error(absl::StrCat(key, " ", why, ", got ", value));
  }

  absl::Status set(C& c, const std::string& key, const std::string& value) const {
    for (const ConfigField<C>& f : fields_) {
      if (f.name != key) continue;
      const std::string why = f.set(c, value);
      return why.empty() ? absl::OkStatus() : error(absl::StrCat(key, " ", why));
    }
    return error(absl::StrCat("unknown key ", config_fields_internal::quoted(key),
                              " (known: ", absl::StrJoin(keys(), ", "), ")"));
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

  // A JSON object of keys to strings or numbers (what to_json writes), applied through set().
  absl::Status set_json(C& c, const nlohmann::json& j) const {
    if (!j.is_object()) return error("not a JSON object");
    for (const auto& [key, v] : j.items()) {
      std::string value;
      if (v.is_string()) {
        value = v.template get<std::string>();
      } else if (v.is_boolean()) {
        value = v.template get<bool>() ? "true" : "false";
      } else if (v.is_number_float()) {
        value = absl::StrFormat("%.17g", v.template get<double>());
      } else if (v.is_number()) {
        value = v.dump();
      } else {
        return error(absl::StrCat(key, " has an unsupported JSON type: ", v.dump()));
      }
      if (absl::Status s = set(c, key, value); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Every field's range, in table order; the first one out of range is the error.
  absl::Status check(const C& c) const {
    for (const ConfigField<C>& f : fields_) {
      const std::string why = f.check(c);
      if (!why.empty()) return error(absl::StrCat(f.name, " ", why));
    }
    return absl::OkStatus();
  }

  // nlohmann::json (keys sorted) or nlohmann::ordered_json (table order).
  template <typename Json = nlohmann::ordered_json>
  Json to_json(const C& c) const {
    Json j = Json::object();
    for (const ConfigField<C>& f : fields_) {
      j[f.name] = std::visit([](const auto& v) { return Json(v); }, f.get(c));
    }
    return j;
  }

 private:
  std::string what_;
  std::vector<ConfigField<C>> fields_;
};

}  // namespace frost
