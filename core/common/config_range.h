#pragma once
// ConfigRange: the range of a typed field (core/common/config_fields.h), and its text in messages and help.
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/common/number_text.h"

namespace frost {

// A closed or open interval of numbers; an infinite end is no bound.
struct ConfigRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  static ConfigRange any() { return {}; }
  static ConfigRange at_least(double lo) {
    return {lo, std::numeric_limits<double>::infinity(), false, false};
  }
  static ConfigRange above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false}; }
  static ConfigRange in(double lo, double hi) { return {lo, hi, false, false}; }
  // (lo, hi]
  static ConfigRange in_lo_open(double lo, double hi) { return {lo, hi, true, false}; }
  static ConfigRange open(double lo, double hi) { return {lo, hi, true, true}; }

  bool contains(double v) const {
    if (std::isnan(v)) return false;
    if (lo_open ? !(v > lo) : !(v >= lo)) return false;
    if (hi_open ? !(v < hi) : !(v <= hi)) return false;
    return true;
  }
  bool bounded() const { return std::isfinite(lo) || std::isfinite(hi); }
  // "must be >= 1", "must be > 0", "must be in [0, 1]", "must be in (0, 1)"; "" for no bound. `unit`
  // follows the interval ("must be in [0, 1024] bytes").
  std::string describe(const std::string& unit = "") const {
    const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
    const std::string u = unit.empty() ? "" : absl::StrCat(" ", unit);
    if (has_lo && has_hi)
      return absl::StrCat("must be in ", lo_open ? "(" : "[", shortest_number_text(lo), ", ",
                          shortest_number_text(hi), hi_open ? ")" : "]", u);
    if (has_lo) return absl::StrCat("must be ", lo_open ? "> " : ">= ", shortest_number_text(lo), u);
    if (has_hi) return absl::StrCat("must be ", hi_open ? "< " : "<= ", shortest_number_text(hi), u);
    return "";
  }
};

}  // namespace frost
