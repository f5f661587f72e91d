// Filters, tests and methods of the chat-template subset (core/model/chat_template.h), each with the semantics
// of jinja2 3.1's builtin (filters.py, tests.py) or of the Python str/dict method the sandbox would call.
// Errors are bare messages; the renderer adds "chat_template: " and the line.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/utf8.h"
#include "core/model/chat_template_internal.h"

namespace frost::chat_template_internal {
namespace {

absl::Status type_error(absl::string_view msg) { return absl::InvalidArgumentError(msg); }

// str.isspace() for one code point.
bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
// Simple case mapping for Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth Latin (Python's
// str.upper/lower cover all of Unicode; these are the scripts chat text commonly has). Not done: Greek final
// sigma in lower(), and the special cases of U+0130 and U+0149.
char32_t upper1(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0xB5) return c;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    bool odd_is_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (c == 0x138 || c == 0x149) return c;
    return odd_is_upper ? ((c % 2 == 0) ? c - 1 : c) : ((c % 2 == 1) ? c - 1 : c);
  }
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3C9) return c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}
char32_t lower1(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xC0) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    bool odd_is_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    return odd_is_upper ? ((c % 2 == 1) ? c + 1 : c) : ((c % 2 == 0) ? c + 1 : c);
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}
bool is_cased(char32_t c) { return upper1(c) != c || lower1(c) != c || c == 0xDF; }

// Appends c in the case asked for; U+00DF (ß) uppercases to "SS" as in Python.
void put_case(std::u32string& out, char32_t c, bool upper) {
  if (upper && c == 0xDF) {
    out += U"SS";
    return;
  }
  out.push_back(upper ? upper1(c) : lower1(c));
}

std::string change_case(const std::string& s, bool upper) {
  std::u32string out;
  for (char32_t c : decode_utf8(s)) put_case(out, c, upper);
  return encode_utf8(out);
}

// str.strip([chars]) and its one-sided forms.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = decode_utf8(s);
  std::u32string set;
  bool use_set = chars != nullptr && chars->type == Value::Type::kString;
  if (use_set) set = decode_utf8(chars->s);
  auto strip_it = [&](char32_t c) { return use_set ? set.find(c) != std::u32string::npos : is_py_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode_utf8(u.substr(b, e - b));
}

// str.split(sep=None, maxsplit=-1).
absl::StatusOr<Value> py_split(const std::string& s, const Value* sep, const Value* maxsplit_v) {
  int64_t maxsplit = maxsplit_v && maxsplit_v->type == Value::Type::kInt ? maxsplit_v->i : -1;
  List out;
  if (sep == nullptr || sep->type == Value::Type::kNone) {
    std::u32string u = decode_utf8(s);
    size_t k = 0;
    while (k < u.size()) {
      while (k < u.size() && is_py_space(u[k])) ++k;
      if (k == u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = u.size();
        while (e > k && is_py_space(u[e - 1])) --e;
        out.push_back(Value::string(encode_utf8(u.substr(k, e - k))));
        break;
      }
      size_t e = k;
      while (e < u.size() && !is_py_space(u[e])) ++e;
      out.push_back(Value::string(encode_utf8(u.substr(k, e - k))));
      k = e;
    }
    return Value::of_list(std::move(out));
  }
  if (sep->type != Value::Type::kString) return type_error("split() separator must be a string or None");
  if (sep->s.empty()) return type_error("empty separator");
  size_t k = 0;
  for (;;) {
    size_t at = s.find(sep->s, k);
    if (at == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(Value::string(s.substr(k)));
      break;
    }
    out.push_back(Value::string(s.substr(k, at - k)));
    k = at + sep->s.size();
  }
  return Value::of_list(std::move(out));
}

// str.replace(old, new, count=-1); an empty `old` inserts `new` around every code point, as Python does.
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    std::u32string u = decode_utf8(s);
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || static_cast<int64_t>(k) < count) out += to;
      if (k < u.size()) out += encode_utf8(u.substr(k, 1));
    }
    return out;
  }
  size_t k = 0;
  int64_t done = 0;
  for (;;) {
    size_t at = (count >= 0 && done >= count) ? std::string::npos : s.find(from, k);
    if (at == std::string::npos) break;
    out.append(s, k, at - k);
    out += to;
    k = at + from.size();
    ++done;
  }
  out.append(s, k, std::string::npos);
  return out;
}

// str.title(): a cased character after an uncased one starts a word.
std::string py_title(const std::string& s) {
  std::u32string out;
  bool prev_cased = false;
  for (char32_t c : decode_utf8(s)) {
    put_case(out, c, !prev_cased);
    prev_cased = is_cased(c);
  }
  return encode_utf8(out);
}

// jinja2's title filter: words start after [-\s({[<]+.
std::string jinja_title(const std::string& s) {
  std::u32string out;
  bool word_start = true;
  for (char32_t c : decode_utf8(s)) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_py_space(c);
    if (sep) out.push_back(c);
    else put_case(out, c, word_start);
    word_start = sep;
  }
  return encode_utf8(out);
}

std::string py_capitalize(const std::string& s) {
  std::u32string out;
  bool first = true;
  for (char32_t c : decode_utf8(s)) {
    put_case(out, c, first);
    first = false;
  }
  return encode_utf8(out);
}

absl::StatusOr<int64_t> length_of(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return 0;
    case Value::Type::kString: return static_cast<int64_t>(decode_utf8(v.s).size());
    case Value::Type::kList: return static_cast<int64_t>(v.list->size());
    case Value::Type::kMap: return static_cast<int64_t>(v.map->size());
    default: return type_error(absl::StrCat("object of type '", type_name(v), "' has no len()"));
  }
}

absl::StatusOr<std::string> string_arg(const CallArgs& args, size_t index, const char* name, const char* fn) {
  const Value* v = args.get(index, name);
  if (v == nullptr) return type_error(absl::StrCat(fn, "() missing argument '", name, "'"));
  if (v->type != Value::Type::kString)
    return type_error(absl::StrCat(fn, "() argument '", name, "' must be str, not ", type_name(*v)));
  return v->s;
}

// Attribute path of selectattr/map(attribute=): "a.b" walks items, missing parts are undefined.
Value attr_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t k = 0;
  while (k <= path.size()) {
    size_t dot = path.find('.', k);
    std::string part = path.substr(k, dot == std::string::npos ? std::string::npos : dot - k);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = digits ? get_item(cur, Value::integer(std::atoll(part.c_str()))) : get_attr(cur, part);
    if (dot == std::string::npos) break;
    k = dot + 1;
  }
  return cur;
}

CallArgs tail_args(const CallArgs& args, size_t from) {
  CallArgs out;
  for (size_t k = from; k < args.positional.size(); ++k) out.positional.push_back(args.positional[k]);
  out.keyword = args.keyword;
  return out;
}

// select/reject/selectattr/rejectattr: keep items whose (attribute's) test result equals `want`.
absl::StatusOr<Value> select_items(const Value& seq, const CallArgs& args, bool by_attr, bool want, Budget& budget) {
  absl::StatusOr<List> items = iterate(seq);
  if (!items.ok()) return items.status();
  absl::Status spent = budget.spend(static_cast<int64_t>(items->size()));
  if (!spent.ok()) return spent;
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    absl::StatusOr<std::string> a = string_arg(args, 0, "attribute", "selectattr");
    if (!a.ok()) return a.status();
    attr = *a;
    next = 1;
  }
  std::string test;
  if (next < args.positional.size()) {
    if (args.positional[next].type != Value::Type::kString) return type_error("test name must be a string");
    test = args.positional[next].s;
    if (!is_known_test(test)) return type_error(absl::StrCat("no test named '", test, "'"));
  }
  CallArgs test_args = tail_args(args, next + 1);
  List out;
  for (const Value& item : *items) {
    Value probe = by_attr ? attr_path(item, attr) : item;
    bool keep;
    if (test.empty()) {
      keep = truthy(probe);
    } else {
      absl::StatusOr<bool> r = apply_test(test, probe, test_args);
      if (!r.ok()) return r.status();
      keep = *r;
    }
    if (keep == want) out.push_back(item);
  }
  return Value::of_list(std::move(out));
}

absl::StatusOr<Value> map_items(const Value& seq, const CallArgs& args, Budget& budget) {
  absl::StatusOr<List> items = iterate(seq);
  if (!items.ok()) return items.status();
  absl::Status spent = budget.spend(static_cast<int64_t>(items->size()));
  if (!spent.ok()) return spent;
  List out;
  if (const Value* attr = args.get(99, "attribute")) {
    if (attr->type != Value::Type::kString) return type_error("map(attribute=...) must be a string");
    const Value* dflt = args.get(99, "default");
    for (const Value& item : *items) {
      Value v = attr_path(item, attr->s);
      out.push_back(v.is_undefined() && dflt ? *dflt : v);
    }
    return Value::of_list(std::move(out));
  }
  if (args.positional.empty() || args.positional[0].type != Value::Type::kString)
    return type_error("map() needs a filter name or attribute=");
  const std::string& filter = args.positional[0].s;
  if (!is_known_filter(filter)) return type_error(absl::StrCat("no filter named '", filter, "'"));
  CallArgs rest = tail_args(args, 1);
  for (const Value& item : *items) {
    absl::StatusOr<Value> v = apply_filter(filter, item, rest, budget);
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return Value::of_list(std::move(out));
}

absl::StatusOr<Value> join_items(const Value& seq, const CallArgs& args, Budget& budget) {
  if (seq.is_undefined()) return Value::string("");
  absl::StatusOr<List> items = iterate(seq);
  if (!items.ok()) return items.status();
  absl::Status spent = budget.spend(static_cast<int64_t>(items->size()));
  if (!spent.ok()) return spent;
  const Value* sep = args.get(0, "d");
  const Value* attr = args.get(1, "attribute");
  std::string out;
  for (size_t k = 0; k < items->size(); ++k) {
    if (k > 0 && sep) out += to_str(*sep);
    out += to_str(attr && attr->type == Value::Type::kString ? attr_path((*items)[k], attr->s) : (*items)[k]);
    if (out.size() > kMaxStringBytes) return type_error("join() result exceeds the string size bound");
  }
  return Value::string(std::move(out));
}

// jinja2's int/float filters: numbers convert, strings parse (int falls back to float parsing), else default.
Value to_int(const Value& v, const CallArgs& args) {
  const Value* dflt = args.get(0, "default");
  Value fallback = dflt ? *dflt : Value::integer(0);
  switch (v.type) {
    case Value::Type::kBool: return Value::integer(v.b);
    case Value::Type::kInt: return v;
    case Value::Type::kDouble:
      return std::isfinite(v.d) && std::fabs(v.d) < 9.2e18 ? Value::integer(static_cast<int64_t>(v.d)) : fallback;
    case Value::Type::kString: {
      std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      errno = 0;
      long long i = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0' && errno == 0) return Value::integer(i);
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(static_cast<int64_t>(d));
      return fallback;
    }
    default: return fallback;
  }
}

Value to_float(const Value& v, const CallArgs& args) {
  const Value* dflt = args.get(0, "default");
  Value fallback = dflt ? *dflt : Value::real(0.0);
  switch (v.type) {
    case Value::Type::kBool: return Value::real(v.b);
    case Value::Type::kInt: return Value::real(static_cast<double>(v.i));
    case Value::Type::kDouble: return v;
    case Value::Type::kString: {
      std::string s = py_strip(v.s, nullptr, true, true);
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      return !s.empty() && *end == '\0' ? Value::real(d) : fallback;
    }
    default: return fallback;
  }
}

absl::StatusOr<Value> first_or_last(const Value& v, bool first) {
  if (v.is_undefined()) return v;
  absl::StatusOr<List> items = iterate(v);
  if (!items.ok()) return items.status();
  if (items->empty()) return Value::undefined("No first item, sequence was empty.");
  return first ? items->front() : items->back();
}

bool starts_or_ends(const std::string& s, const std::string& affix, bool start) {
  if (affix.size() > s.size()) return false;
  return start ? s.compare(0, affix.size(), affix) == 0 : s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
}

// str.replace(old, new[, count]) and the replace filter: one implementation, one size bound.
absl::StatusOr<Value> replace_value(const std::string& s, const CallArgs& args) {
  absl::StatusOr<std::string> from = string_arg(args, 0, "old", "replace");
  absl::StatusOr<std::string> to = string_arg(args, 1, "new", "replace");
  if (!from.ok()) return from.status();
  if (!to.ok()) return to.status();
  const Value* count = args.get(2, "count");
  std::string out = py_replace(s, *from, *to, count && count->type == Value::Type::kInt ? count->i : -1);
  if (out.size() > kMaxStringBytes) return type_error("replace() result exceeds the string size bound");
  return Value::string(std::move(out));
}

absl::StatusOr<Value> string_method(const Value& obj, absl::string_view name, const CallArgs& args) {
  const std::string& s = obj.s;
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::string(py_strip(s, args.get(0, "chars"), name != "rstrip", name != "lstrip"));
  if (name == "upper") return Value::string(change_case(s, true));
  if (name == "lower") return Value::string(change_case(s, false));
  if (name == "title") return Value::string(py_title(s));
  if (name == "capitalize") return Value::string(py_capitalize(s));
  if (name == "startswith" || name == "endswith") {
    const Value* affix = args.get(0, "prefix");
    if (affix == nullptr) return type_error(absl::StrCat(name, "() takes at least 1 argument (0 given)"));
    std::vector<std::string> options;
    if (affix->type == Value::Type::kString) options.push_back(affix->s);
    else if (affix->type == Value::Type::kList)
      for (const Value& o : *affix->list) {
        if (o.type != Value::Type::kString) return type_error(absl::StrCat(name, "() tuple items must be str"));
        options.push_back(o.s);
      }
    else return type_error(absl::StrCat(name, "() first arg must be str or a tuple of str, not ", type_name(*affix)));
    bool hit = std::any_of(options.begin(), options.end(),
                           [&](const std::string& o) { return starts_or_ends(s, o, name == "startswith"); });
    return Value::boolean(hit);
  }
  if (name == "split") return py_split(s, args.get(0, "sep"), args.get(1, "maxsplit"));
  if (name == "replace") return replace_value(s, args);
  if (name == "find" || name == "count") {
    absl::StatusOr<std::string> sub = string_arg(args, 0, "sub", std::string(name).c_str());
    if (!sub.ok()) return sub.status();
    if (name == "find") {
      size_t at = s.find(*sub);
      return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(decode_utf8(s.substr(0, at)).size()));
    }
    if (sub->empty()) return Value::integer(static_cast<int64_t>(decode_utf8(s).size()) + 1);
    int64_t n = 0;
    for (size_t at = s.find(*sub); at != std::string::npos; at = s.find(*sub, at + sub->size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    const Value* seq = args.get(0, "iterable");
    if (seq == nullptr) return type_error("join() takes exactly one argument (0 given)");
    absl::StatusOr<List> items = iterate(*seq);
    if (!items.ok()) return items.status();
    std::string out;
    for (size_t k = 0; k < items->size(); ++k) {
      if ((*items)[k].type != Value::Type::kString)
        return type_error(absl::StrCat("sequence item ", k, ": expected str instance, ", type_name((*items)[k]),
                                       " found"));
      if (k > 0) out += s;
      out += (*items)[k].s;
      if (out.size() > kMaxStringBytes) return type_error("join() result exceeds the string size bound");
    }
    return Value::string(std::move(out));
  }
  return type_error(absl::StrCat("'str' object has no supported method '", name, "'"));
}

absl::StatusOr<Value> map_method(const Value& obj, absl::string_view name, const CallArgs& args) {
  const Map& m = *obj.items();
  if (name == "items" || name == "keys" || name == "values") {
    List out;
    for (const auto& kv : m) {
      if (name == "items") out.push_back(Value::of_list({Value::string(kv.first), kv.second}, /*is_tuple=*/true));
      else out.push_back(name == "keys" ? Value::string(kv.first) : kv.second);
    }
    return Value::of_list(std::move(out));
  }
  if (name == "get") {
    const Value* key = args.get(0, "key");
    if (key == nullptr) return type_error("get expected at least 1 argument, got 0");
    const Value* found = key->type == Value::Type::kString ? find_key(m, key->s) : nullptr;
    if (found) return *found;
    const Value* dflt = args.get(1, "default");
    return dflt ? *dflt : Value::none();
  }
  return type_error(absl::StrCat("'dict' object has no supported method '", name, "'"));
}

}  // namespace

absl::Status Budget::spend(int64_t n) {
  used_ += n;
  if (used_ > kMaxSteps)
    return absl::ResourceExhaustedError(
        absl::StrCat("render exceeds ", kMaxSteps, " steps (loop iterations and items visited)"));
  return absl::OkStatus();
}

const Value* CallArgs::get(size_t index, absl::string_view keyword_name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& kv : keyword)
    if (kv.first == keyword_name) return &kv.second;
  return nullptr;
}

std::u32string decode_utf8(absl::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t k = 0;
  while (k < s.size()) {
    size_t ok = utf8_valid_prefix(std::string_view(s.data() + k, std::min<size_t>(4, s.size() - k)));
    unsigned char c = static_cast<unsigned char>(s[k]);
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (ok < static_cast<size_t>(len)) {  // invalid byte: one U+FFFD, as a lenient decoder would
      out.push_back(0xFFFD);
      ++k;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int j = 1; j < len; ++j) cp = (cp << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
    out.push_back(cp);
    k += len;
  }
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_known_filter(absl::string_view name) {
  static const char* kNames[] = {"trim", "upper", "lower", "capitalize", "title", "length", "count", "first",
                                 "last", "tojson", "string", "default", "d", "join", "replace", "items", "list",
                                 "select", "reject", "selectattr", "rejectattr", "map", "int", "float", "abs",
                                 "safe"};
  return std::any_of(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; });
}

bool is_known_test(absl::string_view name) {
  static const char* kNames[] = {"defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
                                 "true", "false", "mapping", "iterable", "sequence", "equalto", "eq", "ne", "lt",
                                 "le", "gt", "ge", "in", "odd", "even", "divisibleby", "sameas", "lower", "upper"};
  return std::any_of(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; });
}

absl::StatusOr<List> iterate(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return List{};
    case Value::Type::kList: return *v.list;
    case Value::Type::kMap: {
      List keys;
      for (const auto& kv : *v.map) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Type::kString: {
      List chars;
      for (char32_t c : decode_utf8(v.s)) chars.push_back(Value::string(encode_utf8(std::u32string(1, c))));
      return chars;
    }
    default: return type_error(absl::StrCat("'", type_name(v), "' object is not iterable"));
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  if (const Map* m = obj.items())
    if (const Value* v = find_key(*m, name)) return *v;
  return Value::undefined(absl::StrCat("'", type_name(obj), " object' has no attribute '", name, "'"));
}

Value get_item(const Value& obj, const Value& key) {
  if (key.type == Value::Type::kString) {
    if (const Map* m = obj.items())
      if (const Value* v = find_key(*m, key.s)) return *v;
    return get_attr(obj, key.s);
  }
  if ((key.type == Value::Type::kInt || key.type == Value::Type::kBool) &&
      (obj.type == Value::Type::kList || obj.type == Value::Type::kString)) {
    int64_t idx = key.type == Value::Type::kBool ? key.b : key.i;
    if (obj.type == Value::Type::kList) {
      int64_t n = static_cast<int64_t>(obj.list->size());
      if (idx < 0) idx += n;
      if (idx >= 0 && idx < n) return (*obj.list)[static_cast<size_t>(idx)];
    } else {
      std::u32string u = decode_utf8(obj.s);
      int64_t n = static_cast<int64_t>(u.size());
      if (idx < 0) idx += n;
      if (idx >= 0 && idx < n) return Value::string(encode_utf8(u.substr(static_cast<size_t>(idx), 1)));
    }
  }
  return Value::undefined(absl::StrCat("'", type_name(obj), " object' has no element ", to_repr(key)));
}

absl::StatusOr<Value> apply_filter(absl::string_view name, const Value& v, const CallArgs& args, Budget& budget) {
  if (name == "trim") return Value::string(py_strip(to_str(v), args.get(0, "chars"), true, true));
  if (name == "upper") return Value::string(change_case(to_str(v), true));
  if (name == "lower") return Value::string(change_case(to_str(v), false));
  if (name == "capitalize") return Value::string(py_capitalize(to_str(v)));
  if (name == "title") return Value::string(jinja_title(to_str(v)));
  if (name == "string") return Value::string(to_str(v));
  if (name == "safe") return v;
  if (name == "length" || name == "count") {
    absl::StatusOr<int64_t> n = length_of(v);
    if (!n.ok()) return n.status();
    return Value::integer(*n);
  }
  if (name == "first" || name == "last") return first_or_last(v, name == "first");
  if (name == "tojson") {
    const Value* indent = args.get(0, "indent");
    for (const auto& kv : args.keyword)
      if (kv.first != "indent" && !(kv.first == "ensure_ascii" && !truthy(kv.second)))
        return type_error(absl::StrCat("tojson(", kv.first, "=...) is not supported"));
    int n = -1;
    if (indent && indent->type == Value::Type::kInt) n = static_cast<int>(std::clamp<int64_t>(indent->i, 0, 64));
    else if (indent && indent->type != Value::Type::kNone) return type_error("tojson(indent=...) must be an int");
    absl::StatusOr<std::string> s = to_json(v, n);
    if (!s.ok()) return s.status();
    return Value::string(*std::move(s));
  }
  if (name == "default" || name == "d") {
    const Value* dflt = args.get(0, "default_value");
    const Value* boolean = args.get(1, "boolean");
    bool use = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (dflt ? *dflt : Value::string("")) : v;
  }
  if (name == "join") return join_items(v, args, budget);
  if (name == "replace") return replace_value(to_str(v), args);
  if (name == "items") {
    if (v.is_undefined()) return Value::of_list({});
    if (v.type != Value::Type::kMap) return type_error("Can only get item pairs from a mapping.");
    return map_method(v, "items", CallArgs{});
  }
  if (name == "list") {
    absl::StatusOr<List> items = iterate(v);
    if (!items.ok()) return items.status();
    return Value::of_list(*std::move(items));
  }
  if (name == "select" || name == "reject") return select_items(v, args, false, name == "select", budget);
  if (name == "selectattr" || name == "rejectattr") return select_items(v, args, true, name == "selectattr", budget);
  if (name == "map") return map_items(v, args, budget);
  if (name == "int") return to_int(v, args);
  if (name == "float") return to_float(v, args);
  if (name == "abs") {
    if (v.type == Value::Type::kInt || v.type == Value::Type::kBool) {
      int64_t x = v.type == Value::Type::kBool ? v.b : v.i;
      if (x == INT64_MIN) return type_error("integer overflow");
      return Value::integer(x < 0 ? -x : x);
    }
    if (v.type == Value::Type::kDouble) return Value::real(std::fabs(v.d));
    return type_error(absl::StrCat("bad operand type for abs(): '", type_name(v), "'"));
  }
  return type_error(absl::StrCat("no filter named '", name, "'"));
}

absl::StatusOr<bool> apply_test(absl::string_view name, const Value& v, const CallArgs& args) {
  using T = Value::Type;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.type == T::kNone;
  if (name == "string") return v.type == T::kString;
  if (name == "number") return v.is_number();
  if (name == "integer") return v.type == T::kInt;
  if (name == "float") return v.type == T::kDouble;
  if (name == "boolean") return v.type == T::kBool;
  if (name == "true") return v.type == T::kBool && v.b;
  if (name == "false") return v.type == T::kBool && !v.b;
  if (name == "mapping") return v.type == T::kMap;
  if (name == "iterable") return v.type == T::kUndefined || v.type == T::kString || v.type == T::kList || v.type == T::kMap;
  if (name == "sequence") return v.type == T::kString || v.type == T::kList || v.type == T::kMap;
  if (name == "lower" || name == "upper") {
    std::string s = to_str(v);
    return s == change_case(s, name == "upper");
  }
  if (name == "odd" || name == "even") {
    if (v.type != T::kInt) return type_error(absl::StrCat("test '", name, "' needs an integer"));
    return (v.i % 2 != 0) == (name == "odd");
  }
  const Value* other = args.get(0, "other");
  if (other == nullptr) return type_error(absl::StrCat("test '", name, "' needs an argument"));
  if (name == "equalto" || name == "eq") return values_equal(v, *other);
  if (name == "ne") return !values_equal(v, *other);
  if (name == "sameas") return v.type == other->type && values_equal(v, *other);
  if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
    bool less;
    bool swap = name == "gt" || name == "le";
    absl::Status s = swap ? value_less(*other, v, &less) : value_less(v, *other, &less);
    if (!s.ok()) return s;
    return (name == "lt" || name == "gt") ? less : !less;
  }
  if (name == "in") {
    if (other->type == T::kString) {
      if (v.type != T::kString) return type_error("'in <string>' requires string as left operand");
      return other->s.find(v.s) != std::string::npos;
    }
    absl::StatusOr<List> items = iterate(*other);
    if (!items.ok()) return items.status();
    return std::any_of(items->begin(), items->end(), [&](const Value& x) { return values_equal(x, v); });
  }
  if (name == "divisibleby") {
    if (v.type != T::kInt || other->type != T::kInt) return type_error("test 'divisibleby' needs integers");
    if (other->i == 0) return type_error("integer division or modulo by zero");
    return v.i % other->i == 0;
  }
  return type_error(absl::StrCat("no test named '", name, "'"));
}

absl::StatusOr<Value> call_method(const Value& obj, absl::string_view name, const CallArgs& args, Budget& budget) {
  if (obj.type == Value::Type::kString) return string_method(obj, name, args);
  if (obj.type == Value::Type::kMap) return map_method(obj, name, args);
  return type_error(absl::StrCat("'", type_name(obj), "' object has no supported method '", name, "'"));
}

}  // namespace frost::chat_template_internal
