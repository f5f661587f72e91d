#include "core/common/json.h"

#include "absl/strings/str_cat.h"
#include "core/common/json_depth.h"

namespace frost {
namespace {

// Deepest nesting of objects and arrays in `text`, stopping as soon as it passes `max_depth`. Exact for valid
// JSON (brackets inside strings do not count), which is all the parser accepts; one pass, no allocation.
// (nlohmann's callback parser could count while it parses, but its DOM builder scans a container's members
// at every child's end: quadratic on a wide object — 20,000 members took 2.4 s.)
int nesting_depth(std::string_view text, int max_depth) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[': case '{':
        if (++depth > deepest && (deepest = depth) > max_depth) return deepest;
        break;
      case ']': case '}': --depth; break;
      default: break;
    }
  }
  return deepest;
}

template <typename Json>
std::optional<std::string> parse_bounded(std::string_view text, int max_depth, Json* out) {
  if (nesting_depth(text, max_depth) > max_depth) return absl::StrCat("JSON nests deeper than ", max_depth, " levels");
  try {
    *out = Json::parse(text.begin(), text.end());
  } catch (const typename Json::exception& e) {
    return absl::StrCat("not valid JSON: ", e.what());
  } catch (const std::exception& e) {
    return absl::StrCat("cannot parse: ", e.what());
  }
  return std::nullopt;
}

}  // namespace

namespace {

size_t skip_ws(std::string_view t, size_t i) {
  while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) ++i;
  return i;
}

// The end of the string starting at t[i] == '"' (one past its closing quote).
size_t skip_string(std::string_view t, size_t i) {
  for (++i; i < t.size(); ++i) {
    if (t[i] == '\\') {
      ++i;
    } else if (t[i] == '"') {
      return i + 1;
    }
  }
  return t.size();
}

// The end of the value starting at t[i] (valid JSON).
size_t skip_value(std::string_view t, size_t i) {
  if (i >= t.size()) return i;
  if (t[i] == '"') return skip_string(t, i);
  if (t[i] == '{' || t[i] == '[') {
    int depth = 0;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '"') {
        i = skip_string(t, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if ((c == '}' || c == ']') && --depth == 0) return i + 1;
      ++i;
    }
    return i;
  }
  while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && t[i] != ' ' && t[i] != '\t' &&
         t[i] != '\n' && t[i] != '\r')
    ++i;
  return i;
}

}  // namespace

std::optional<std::string_view> json_value_span(std::string_view text, const std::vector<std::string>& path) {
  size_t begin = skip_ws(text, 0), end = skip_value(text, begin);
  for (const std::string& want : path) {
    if (begin >= text.size() || text[begin] != '{') return std::nullopt;
    std::optional<std::pair<size_t, size_t>> found;
    size_t i = skip_ws(text, begin + 1);
    while (i < end && text[i] == '"') {
      const size_t key_end = skip_string(text, i);
      const std::string_view raw = text.substr(i + 1, key_end - i - 2);
      bool match = false;
      if (raw.find('\\') == std::string_view::npos) {
        match = raw == want;
      } else {  // an escaped key: decode it
        const nlohmann::json k = nlohmann::json::parse(text.substr(i, key_end - i), nullptr, false);
        match = k.is_string() && k.get_ref<const std::string&>() == want;
      }
      i = skip_ws(text, key_end);
      if (i >= end || text[i] != ':') return std::nullopt;
      const size_t v = skip_ws(text, i + 1);
      const size_t v_end = skip_value(text, v);
      if (match) found = std::make_pair(v, v_end);
      i = skip_ws(text, v_end);
      if (i < end && text[i] == ',') i = skip_ws(text, i + 1);
    }
    if (!found) return std::nullopt;
    begin = found->first;
    end = found->second;
  }
  return text.substr(begin, end - begin);
}

std::optional<std::string> parse_json_bounded(std::string_view text, int max_depth, nlohmann::json* out) {
  return parse_bounded(text, max_depth, out);
}

bool json_nests_deeper(std::string_view text, int max_depth) {
  return nesting_depth(text, max_depth) > max_depth;
}

}  // namespace frost
