#include "core/common/json.h"

#include "absl/strings/str_cat.h"

namespace frost {
namespace {

template <typename Json>
std::optional<std::string> parse_bounded(std::string_view text, int max_depth, Json* out) {
  struct TooDeep {};
  int depth = 0;
  typename Json::parser_callback_t cb = [&depth, max_depth](int, typename Json::parse_event_t ev, Json&) -> bool {
    if (ev == Json::parse_event_t::object_start || ev == Json::parse_event_t::array_start) {
      if (++depth > max_depth) throw TooDeep{};
    } else if (ev == Json::parse_event_t::object_end || ev == Json::parse_event_t::array_end) {
      --depth;
    }
    return true;
  };
  try {
    *out = Json::parse(text.begin(), text.end(), cb);
  } catch (const TooDeep&) {
    return absl::StrCat("JSON nests deeper than ", max_depth, " levels");
  } catch (const typename Json::exception& e) {
    return absl::StrCat("not valid JSON: ", e.what());
  } catch (const std::exception& e) {
    return absl::StrCat("cannot parse: ", e.what());
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> parse_json_bounded(std::string_view text, int max_depth, nlohmann::json* out) {
  return parse_bounded(text, max_depth, out);
}

std::optional<std::string> parse_json_bounded(std::string_view text, int max_depth, nlohmann::ordered_json* out) {
  return parse_bounded(text, max_depth, out);
}

}  // namespace frost
