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

namespace frost {

// Parses `text` into *out. Refuses nesting deeper than `max_depth` (objects + arrays) as soon as the parser
// reaches that level, so a pathological document cannot exhaust the stack. Returns nullopt on success, else
// the reason without any source prefix: "JSON nests deeper than N levels", "not valid JSON: <parser
// message>", or "cannot parse: <what>" for any other failure (e.g. out of memory).
std::optional<std::string> parse_json_bounded(std::string_view text, int max_depth, nlohmann::json* out);
// The same into an ordered_json (keeps object member order: JSON Schema properties, chat tool arguments).
std::optional<std::string> parse_json_bounded(std::string_view text, int max_depth, nlohmann::ordered_json* out);

}  // namespace frost
