#pragma once
// The shortest decimal text of a number that reads back as the same number: the one such formatter (config
// dumps and range texts, core/common/config_fields.h; the server's YAML dump; corruption specs; label
// messages; a response's echoed sampling).
#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace frost {

// The shortest decimal text that reads back as `v`; whole numbers without exponent (65536, not 65536.0 or
// 6.5536e+04); "inf", "-inf" and "nan" for the non-finite.
inline std::string shortest_number_text(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  for (int precision = 1; precision < 17; ++precision) {
    const std::string s = absl::StrFormat("%.*g", precision, v);
    double back = 0;
    if (absl::SimpleAtod(s, &back) && back == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

// The same for a float: the shortest text that reads back as `v` *as a float* (0.8f is "0.8", where
// shortest_number_text(0.8f) spells out the double it widens to, "0.800000011920929"). For a value held as a
// float and shown as a number (the sampling a response echoes: server/openai_responses.cc).
inline std::string shortest_float_text(float v) {
  if (!std::isfinite(v)) return shortest_number_text(v);
  for (int precision = 1; precision < 9; ++precision) {
    const std::string s = absl::StrFormat("%.*g", precision, v);
    float back = 0;
    if (absl::SimpleAtof(s, &back) && back == v) return s;
  }
  return absl::StrFormat("%.9g", v);
}

}  // namespace frost
