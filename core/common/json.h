#pragma once
// Untrusted JSON text → nlohmann::json, with no exception escaping and bounded nesting.
//
// nlohmann's parser is iterative, but much of what follows a parse is not: dump(), copies, comparisons and
// every visitor recurse once per level. A document from a client must therefore be refused at parse time when
// it nests deeper than its consumer expects — before any recursive code sees it.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace frost {

// Parses `text` into *out. Refuses nesting deeper than `max_depth` (objects + arrays) as soon as the parser
// reaches that level, so a pathological document cannot exhaust the stack. Returns nullopt on success, else
// the reason without any source prefix: "JSON nests deeper than N levels", "not valid JSON: <parser
// message>", or "cannot parse: <what>" for any other failure (e.g. out of memory).
std::optional<std::string> parse_json_bounded(std::string_view text, int max_depth, nlohmann::json* out);

// In `text`, a valid JSON document (one parse_json_bounded accepted), the exact bytes of the value reached by
// following the object keys of `path` from the root; nullopt when a step is not an object or lacks the key.
// A duplicate key resolves to its last value, as nlohmann's parser does. One pass, iterative, no DOM: for
// taking a member's text as the client wrote it (a JSON Schema's properties keep their order) without parsing
// the document again into an ordered_json, whose object insert is linear in the members already there.
std::optional<std::string_view> json_value_span(std::string_view text, const std::vector<std::string>& path);

// Where the strings of a JSON text are, one character at a time, for scanners that read its structure without
// parsing it (bracket depth, element boundaries, whitespace outside strings): step(c) is true when `c` belongs to
// a string — its quotes and escapes included — and false for structure and whitespace outside strings.
struct JsonStringState {
  bool in_string = false;
  bool escape = false;
  bool step(char c) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      return true;
    }
    in_string = c == '"';
    return in_string;
  }
};

}  // namespace frost
