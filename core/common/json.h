#pragma once
// Untrusted JSON text → nlohmann::json, with no exception escaping and bounded nesting.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace frost {

// Parses `text` into *out. Refuses nesting deeper than `max_depth` (objects + arrays), so a
// pathological file cannot exhaust the stack. Returns nullopt on success, else the reason without
// any source prefix: "JSON nests deeper than N levels", "not valid JSON: <parser message>", or
// "cannot parse: <what>" for any other failure (e.g. out of memory).
std::optional<std::string> parse_json_bounded(std::string_view text, int max_depth, nlohmann::json* out);

}  // namespace frost
