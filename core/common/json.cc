#include "core/common/json.h"

#include "absl/strings/str_cat.h"

namespace frost {

std::optional<std::string> parse_json_bounded(std::string_view text, int max_depth, nlohmann::json* out) {
  using json = nlohmann::json;
  struct TooDeep {};
  int depth = 0;
  json::parser_callback_t cb = [&depth, max_depth](int, json::parse_event_t ev, json&) -> bool {
    if (ev == json::parse_event_t::object_start || ev == json::parse_event_t::array_start) {
      if (++depth > max_depth) throw TooDeep{};
    } else if (ev == json::parse_event_t::object_end || ev == json::parse_event_t::array_end) {
      --depth;
    }
    return true;
  };
  try {
    *out = json::parse(text.begin(), text.end(), cb);
  } catch (const TooDeep&) {
    return absl::StrCat("JSON nests deeper than ", max_depth, " levels");
  } catch (const json::exception& e) {
    return absl::StrCat("not valid JSON: ", e.what());
  } catch (const std::exception& e) {
    return absl::StrCat("cannot parse: ", e.what());
  }
  return std::nullopt;
}

}  // namespace frost
