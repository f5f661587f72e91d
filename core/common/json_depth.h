#pragma once
// The nesting bound of parse_json_bounded (core/common/json.h) as data: a caller that words the refusal its
// own way (the OpenAI endpoints' "the request body nests deeper than ...") asks this instead of reading the
// reason's text.
#include <string_view>

namespace frost {

// Whether `text` nests objects + arrays deeper than `max_depth` (parse_json_bounded's refusal). One pass, no
// parse.
bool json_nests_deeper(std::string_view text, int max_depth);

}  // namespace frost
