// Chat-template values (core/model/chat_template_internal.h). They follow Python's semantics because the
// reference is jinja2 running on Python objects: str()/repr() output, == across int/float/bool, truthiness,
// ordering, and json.dumps formatting (transformers' tojson: ensure_ascii=False).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/model/chat_template_internal.h"

namespace frost {
namespace chat_template_internal {
namespace {

// Python's repr(float): the shortest digits that round-trip, fixed notation for 1e-4 <= |x| < 1e16.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  // buf: [-]d[.ddd]e[+-]XX
  std::string s(buf);
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  size_t e = s.find('e');
  int exp = std::atoi(s.c_str() + e + 1);
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {  // -4 <= exp < 16
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ebuf;
  }
  return neg ? "-" + out : out;
}

std::string string_repr(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(q)) {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(q);
  return out;
}

void json_string(const std::string& s, std::string& out) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

absl::Status json_value(const Value& v, int indent, int level, std::string& out) {
  if (out.size() > kMaxStringBytes) return absl::InvalidArgumentError("tojson result exceeds the string size bound");
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(indent) * lvl, ' ');
  };
  const char* sep = indent < 0 ? ", " : ",";
  switch (v.type) {
    case Value::Type::kNone: out += "null"; return absl::OkStatus();
    case Value::Type::kBool: out += v.b ? "true" : "false"; return absl::OkStatus();
    case Value::Type::kInt: out += std::to_string(v.i); return absl::OkStatus();
    case Value::Type::kDouble:
      out += std::isnan(v.d) ? "NaN" : std::isinf(v.d) ? (v.d < 0 ? "-Infinity" : "Infinity") : float_repr(v.d);
      return absl::OkStatus();
    case Value::Type::kString: json_string(v.s, out); return absl::OkStatus();
    case Value::Type::kList: {
      if (v.list->empty()) {
        out += "[]";
        return absl::OkStatus();
      }
      out.push_back('[');
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k > 0) out += sep;
        newline(level + 1);
        absl::Status s = json_value((*v.list)[k], indent, level + 1, out);
        if (!s.ok()) return s;
      }
      newline(level);
      out.push_back(']');
      return absl::OkStatus();
    }
    case Value::Type::kMap: {
      if (v.map->empty()) {
        out += "{}";
        return absl::OkStatus();
      }
      out.push_back('{');
      for (size_t k = 0; k < v.map->size(); ++k) {
        if (k > 0) out += sep;
        newline(level + 1);
        json_string((*v.map)[k].first, out);
        out += ": ";
        absl::Status s = json_value((*v.map)[k].second, indent, level + 1, out);
        if (!s.ok()) return s;
      }
      newline(level);
      out.push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("Object of type ", type_name(v), " is not JSON serializable"));
  }
}

}  // namespace

const Value* find_key(const Map& m, absl::string_view key) {
  for (const auto& kv : m)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

const char* type_name(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return "Undefined";
    case Value::Type::kNone: return "NoneType";
    case Value::Type::kBool: return "bool";
    case Value::Type::kInt: return "int";
    case Value::Type::kDouble: return "float";
    case Value::Type::kString: return "str";
    case Value::Type::kList: return v.tuple ? "tuple" : "list";
    case Value::Type::kMap: return "dict";
    case Value::Type::kNamespace: return "Namespace";
    case Value::Type::kFunction: return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return false;
    case Value::Type::kBool: return v.b;
    case Value::Type::kInt: return v.i != 0;
    case Value::Type::kDouble: return v.d != 0;
    case Value::Type::kString: return !v.s.empty();
    case Value::Type::kList: return !v.list->empty();
    case Value::Type::kMap: return !v.map->empty();
    case Value::Type::kNamespace:
    case Value::Type::kFunction: return true;
  }
  return false;
}

std::string to_str(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return "";
    case Value::Type::kString: return v.s;
    default: return to_repr(v);
  }
}

std::string to_repr(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return "Undefined";
    case Value::Type::kNone: return "None";
    case Value::Type::kBool: return v.b ? "True" : "False";
    case Value::Type::kInt: return std::to_string(v.i);
    case Value::Type::kDouble: return float_repr(v.d);
    case Value::Type::kString: return string_repr(v.s);
    case Value::Type::kList: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k > 0) out += ", ";
        out += to_repr((*v.list)[k]);
      }
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::Type::kMap: {
      std::string out = "{";
      for (size_t k = 0; k < v.map->size(); ++k) {
        if (k > 0) out += ", ";
        out += string_repr((*v.map)[k].first) + ": " + to_repr((*v.map)[k].second);
      }
      return out + "}";
    }
    case Value::Type::kNamespace: return "<Namespace>";
    case Value::Type::kFunction: return absl::StrCat("<function ", v.s, ">");
  }
  return "";
}

absl::StatusOr<std::string> to_json(const Value& v, int indent) {
  std::string out;
  absl::Status s = json_value(v, indent, 0, out);
  if (!s.ok()) return s;
  return out;
}

bool values_equal(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.type == T::kDouble || b.type == T::kDouble) {
      auto as_d = [](const Value& x) { return x.type == T::kDouble ? x.d : x.type == T::kInt ? double(x.i) : double(x.b); };
      return as_d(a) == as_d(b);
    }
    return (a.type == T::kInt ? a.i : a.b) == (b.type == T::kInt ? b.i : b.b);
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case T::kUndefined:
    case T::kNone: return true;
    case T::kString: return a.s == b.s;
    case T::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!values_equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case T::kMap:  // Python dict equality ignores order
      if (a.map->size() != b.map->size()) return false;
      for (const auto& kv : *a.map) {
        const Value* other = find_key(*b.map, kv.first);
        if (other == nullptr || !values_equal(kv.second, *other)) return false;
      }
      return true;
    case T::kNamespace: return a.ns == b.ns;
    case T::kFunction: return a.s == b.s;
    default: return false;
  }
}

absl::Status value_less(const Value& a, const Value& b, bool* less) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    auto as_d = [](const Value& x) { return x.type == T::kDouble ? x.d : x.type == T::kInt ? double(x.i) : double(x.b); };
    if (a.type != T::kDouble && b.type != T::kDouble)
      *less = (a.type == T::kInt ? a.i : a.b) < (b.type == T::kInt ? b.i : b.b);
    else
      *less = as_d(a) < as_d(b);
    return absl::OkStatus();
  }
  if (a.type == T::kString && b.type == T::kString) {
    *less = a.s < b.s;  // UTF-8 byte order is code point order
    return absl::OkStatus();
  }
  if (a.type == T::kList && b.type == T::kList) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (values_equal((*a.list)[k], (*b.list)[k])) continue;
      return value_less((*a.list)[k], (*b.list)[k], less);
    }
    *less = a.list->size() < b.list->size();
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '", type_name(a), "' and '",
                                                 type_name(b), "'"));
}

namespace {

// Deepest nesting of arrays/objects in JSON text (strings skipped), to refuse a document before building it.
int json_depth(absl::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t k = 0; k < text.size(); ++k) {
    const char c = text[k];
    if (in_string) {
      if (c == '\\') ++k;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                   : Value::real(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::of_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Map m;
      for (auto it = j.begin(); it != j.end(); ++it) {
        Value* slot = const_cast<Value*>(find_key(m, it.key()));
        if (slot) *slot = from_json(it.value());  // a repeated member: the last wins, as in json.loads
        else m.emplace_back(it.key(), from_json(it.value()));
      }
      return Value::of_map(std::move(m));
    }
    default: return Value::none();
  }
}

const char* const kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                               "July",    "August",   "September", "October", "November", "December"};
const char* const kDays[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};

}  // namespace

absl::StatusOr<Value> value_from_json(absl::string_view text) {
  if (json_depth(text) > kMaxValueDepth)
    return absl::InvalidArgumentError(absl::StrCat("JSON nests deeper than ", kMaxValueDepth, " levels"));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  return from_json(j);
}

std::string format_time(absl::string_view format, int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  auto num = [](int v, int width, char pad = '0') {
    std::string s = std::to_string(v);
    return s.size() < static_cast<size_t>(width) ? std::string(width - s.size(), pad) + s : s;
  };
  std::string out;
  for (size_t k = 0; k < format.size(); ++k) {
    if (format[k] != '%' || k + 1 == format.size()) {
      out.push_back(format[k]);
      continue;
    }
    const char d = format[++k];
    switch (d) {
      case 'Y': out += std::to_string(tm.tm_year + 1900); break;
      case 'y': out += num((tm.tm_year + 1900) % 100, 2); break;
      case 'm': out += num(tm.tm_mon + 1, 2); break;
      case 'd': out += num(tm.tm_mday, 2); break;
      case 'e': out += num(tm.tm_mday, 2, ' '); break;
      case 'j': out += num(tm.tm_yday + 1, 3); break;
      case 'b': out += std::string(kMonths[tm.tm_mon], 3); break;
      case 'B': out += kMonths[tm.tm_mon]; break;
      case 'a': out += std::string(kDays[tm.tm_wday], 3); break;
      case 'A': out += kDays[tm.tm_wday]; break;
      case 'H': out += num(tm.tm_hour, 2); break;
      case 'I': out += num(tm.tm_hour % 12 == 0 ? 12 : tm.tm_hour % 12, 2); break;
      case 'M': out += num(tm.tm_min, 2); break;
      case 'S': out += num(tm.tm_sec, 2); break;
      case 'p': out += tm.tm_hour < 12 ? "AM" : "PM"; break;
      case '%': out.push_back('%'); break;
      default:
        out.push_back('%');
        out.push_back(d);
    }
  }
  return out;
}

}  // namespace chat_template_internal

}  // namespace frost
