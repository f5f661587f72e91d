// frostctl's pure formatting and parsing helpers (see format.h).
#include "client/frostctl/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace frost::ctl {
namespace {

// This Abseil's string_view is its own type, not std::string_view.
absl::string_view av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool is_blank(std::string_view s) { return std::all_of(s.begin(), s.end(), is_ascii_space); }

// Calls f(line_number, line) for each "\n"-separated line of `content` (1-based numbers, the trailing "\r"
// of a CRLF line removed). A final line without "\n" counts; an empty final piece after the last "\n"
// does not.
template <typename F>
void for_each_line(std::string_view content, F&& f) {
  size_t line_number = 0;
  size_t start = 0;
  while (start < content.size()) {
    const size_t end = std::min(content.find('\n', start), content.size());
    std::string_view line = content.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    f(++line_number, line);
    start = end + 1;
  }
}

// "a string", "a number", ... for messages about a JSON value of the wrong type.
std::string json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      return "a number";
    default:
      return "not a JSON value";
  }
}

// The reason a parsed JSONL line is not a training row, or "" when it is one (then *row is filled).
std::string check_training_row(const nlohmann::json& j, const std::optional<LabelRange>& range,
                               frost::v1::TrainingRow* row) {
  if (!j.is_object()) return absl::StrCat("expected a JSON object, got ", json_kind(j));
  const auto text = j.find("text");
  if (text == j.end()) return "\"text\" is missing";
  if (!text->is_string()) return absl::StrCat("\"text\" is ", json_kind(*text), ", not a string");
  const std::string& text_value = text->get_ref<const std::string&>();
  if (is_blank(text_value)) return "\"text\" is empty";
  const auto label = j.find("label");
  if (label == j.end()) return "\"label\" is missing";
  if (!label->is_number()) return absl::StrCat("\"label\" is ", json_kind(*label), ", not a number");
  const double label_value = label->get<double>();
  if (!std::isfinite(label_value)) return "\"label\" is not finite";
  if (range && (label_value < range->min || label_value > range->max)) {
    return absl::StrFormat("\"label\" %g is outside [%g, %g]", label_value, range->min, range->max);
  }
  row->set_text(text_value);
  row->set_label(label_value);
  if (const auto id = j.find("id"); id != j.end() && id->is_string()) {
    row->set_id(id->get_ref<const std::string&>());
  }
  return "";
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;  // continuation bytes
    uint32_t cp = 0;
    uint32_t min_cp = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F, min_cp = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F, min_cp = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07, min_cp = 0x10000;
    } else {
      return false;  // a continuation byte without a lead byte, or 0xF8..0xFF
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      if (!is_continuation(s[i + k])) return false;
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

size_t utf8_length(std::string_view s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return !is_continuation(c); }));
}

std::string utf8_truncate(std::string_view s, size_t max_chars) {
  if (utf8_length(s) <= max_chars) return std::string(s);
  if (max_chars == 0) return "";
  // Keep max_chars - 1 code points: cut before the start byte of code point number max_chars.
  const size_t keep = max_chars - 1;
  size_t seen = 0;
  size_t cut = 0;
  for (; cut < s.size(); ++cut) {
    if (is_continuation(s[cut])) continue;
    if (seen == keep) break;
    ++seen;
  }
  std::string_view kept = s.substr(0, cut);
  while (!kept.empty() && is_ascii_space(kept.back())) kept.remove_suffix(1);  // "hello…", not "hello …"
  return absl::StrCat(av(kept), "\u2026");
}

std::string one_line(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) c = ' ';
  }
  return out;
}

std::string trim_trailing_whitespace(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

std::vector<std::string> text_lines(std::string_view content) {
  std::vector<std::string> lines;
  for_each_line(content, [&lines](size_t, std::string_view line) {
    if (!is_blank(line)) lines.emplace_back(line);
  });
  return lines;
}

absl::Status check_bearer_token(std::string_view token) {
  if (token.empty()) return absl::InvalidArgumentError("the token is empty");
  for (const char c : token) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x21 || u > 0x7E) {
      return absl::InvalidArgumentError(
          "the token holds a character that cannot be sent in a header (only visible ASCII is allowed)");
    }
  }
  return absl::OkStatus();
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 0) return absl::StrCat(bytes);
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // 1023.96 KiB prints as "1.0 MiB", not "1024.0 KiB".
  while (v >= 1023.95 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds >= 99.0 * 86400) return ">99d";
  const long long s = std::llround(seconds);
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  const long long m = std::llround(seconds / 60);
  if (m < 24 * 60) return absl::StrFormat("%dh%02dm", m / 60, m % 60);
  const long long h = std::llround(seconds / 3600);
  return absl::StrFormat("%dd%02dh", h / 24, h % 24);
}

std::string format_unix_time(double unix_s) {
  // Up to the year 9999, so the result always has the same shape.
  if (!std::isfinite(unix_s) || unix_s <= 0 || unix_s >= 253402300800.0) return "-";
  const std::time_t t = static_cast<std::time_t>(std::floor(unix_s));
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "-";
  char buf[32];
  if (std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) return "-";
  return buf;
}

absl::StatusOr<frost::v1::JobState> parse_job_state(std::string_view name) {
  std::string upper = absl::AsciiStrToUpper(av(name));
  if (absl::StartsWith(upper, "JOB_STATE_")) upper = upper.substr(std::string_view("JOB_STATE_").size());
  if (upper == "CANCELED") upper = "CANCELLED";
  frost::v1::JobState state = frost::v1::JOB_STATE_UNSPECIFIED;
  if (upper != "UNSPECIFIED" && frost::v1::JobState_Parse(absl::StrCat("JOB_STATE_", upper), &state)) {
    return state;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job state \"", av(name),
                   "\" (expected queued, running, succeeded, failed, cancelled or interrupted)"));
}

std::string job_state_name(frost::v1::JobState state) {
  const std::string& name = frost::v1::JobState_Name(state);
  if (!absl::StartsWith(name, "JOB_STATE_")) return absl::StrCat("STATE_", static_cast<int>(state));
  return name.substr(std::string_view("JOB_STATE_").size());
}

bool is_terminal_state(frost::v1::JobState state) {
  return state == frost::v1::JOB_STATE_SUCCEEDED || state == frost::v1::JOB_STATE_FAILED ||
         state == frost::v1::JOB_STATE_CANCELLED || state == frost::v1::JOB_STATE_INTERRUPTED;
}

std::string render_bar(int64_t step, int64_t total, int width) {
  if (total <= 0 || width < 3) return "";
  const int inner = width - 2;
  const double fraction =
      static_cast<double>(std::clamp<int64_t>(step, 0, total)) / static_cast<double>(total);
  const int filled = std::clamp(static_cast<int>(fraction * inner), 0, inner);
  return absl::StrCat("[", std::string(filled, '#'), std::string(inner - filled, '.'), "]");
}

namespace {

bool has_progress(const frost::v1::JobProgress& p) {
  return !p.stage().empty() || p.step() > 0 || p.steps_total() > 0;
}

// 0..100, rounded down (100 only when step >= total).
int64_t percent(int64_t step, int64_t total) {
  if (total <= 0) return 0;
  return static_cast<int64_t>(static_cast<double>(std::clamp<int64_t>(step, 0, total)) * 100.0 /
                              static_cast<double>(total));
}

}  // namespace

std::string progress_text(const frost::v1::JobProgress& p) {
  if (!has_progress(p)) return "";
  std::vector<std::string> parts;
  if (!p.stage().empty()) parts.push_back(absl::StrCat("stage=", p.stage()));
  parts.push_back(absl::StrCat("epoch=", p.epoch()));
  parts.push_back(p.steps_total() > 0 ? absl::StrCat("step=", p.step(), "/", p.steps_total())
                                      : absl::StrCat("step=", p.step()));
  if (p.step() > 0) parts.push_back(absl::StrFormat("loss=%.4g", p.loss()));
  if (p.examples_per_s() > 0) parts.push_back(absl::StrFormat("ex/s=%.1f", p.examples_per_s()));
  if (p.eta_s() > 0) parts.push_back(absl::StrCat("eta=", format_duration(p.eta_s())));
  return absl::StrJoin(parts, " ");
}

std::string job_event_line(const frost::v1::Job& job) {
  std::string line = job_state_name(job.state());
  if (const std::string progress = progress_text(job.progress()); !progress.empty()) {
    absl::StrAppend(&line, " ", progress);
  }
  if (!job.artifact().empty()) absl::StrAppend(&line, " artifact=", job.artifact());
  return line;
}

std::string render_progress_line(const frost::v1::Job& job, int max_columns) {
  if (max_columns <= 0) return "";
  const frost::v1::JobProgress& p = job.progress();
  std::string head = job_state_name(job.state());
  // The fields after the bar, each with its leading space; the optional ones are dropped, in the order
  // ex/s, ETA, loss, while the bar does not fit.
  std::string steps, loss, rate, eta;
  if (has_progress(p)) {
    if (!p.stage().empty()) absl::StrAppend(&head, " ", p.stage());
    absl::StrAppend(&head, " epoch ", p.epoch());
    steps = p.steps_total() > 0 ? absl::StrCat(" ", p.step(), "/", p.steps_total(), " ",
                                               percent(p.step(), p.steps_total()), "%")
                                : absl::StrCat(" step ", p.step());
    if (p.step() > 0) loss = absl::StrFormat(" loss %.4g", p.loss());
    if (p.examples_per_s() > 0) rate = absl::StrFormat(" %.1f ex/s", p.examples_per_s());
    if (p.eta_s() > 0) eta = absl::StrCat(" ETA ", format_duration(p.eta_s()));
  }
  constexpr int kMaxBar = 30;
  constexpr int kMinBar = 10;
  auto room_for_bar = [&] {
    const size_t used = utf8_length(head) + utf8_length(steps) + loss.size() + rate.size() + eta.size() + 1;
    return max_columns - static_cast<int>(used);
  };
  std::string bar;
  if (p.steps_total() > 0) {
    // Drop fields only when that makes the bar fit; otherwise keep them and leave the bar out.
    const size_t optional_columns = loss.size() + rate.size() + eta.size();
    if (room_for_bar() + static_cast<int>(optional_columns) >= kMinBar) {
      for (std::string* optional : {&rate, &eta, &loss}) {
        if (room_for_bar() >= kMinBar) break;
        optional->clear();
      }
    }
    const int bar_width = std::min(room_for_bar(), kMaxBar);
    if (bar_width >= kMinBar) bar = absl::StrCat(" ", render_bar(p.step(), p.steps_total(), bar_width));
  }
  return utf8_truncate(absl::StrCat(head, bar, steps, loss, rate, eta), static_cast<size_t>(max_columns));
}

absl::StatusOr<frost::v1::InlineRows> parse_inline_jsonl(std::string_view content, std::string_view source,
                                                         std::optional<LabelRange> range) {
  frost::v1::InlineRows rows;
  std::string error;
  for_each_line(content, [&](size_t line_number, std::string_view line) {
    if (!error.empty() || is_blank(line)) return;
    std::string reason;
    if (!is_valid_utf8(line)) {
      reason = "not valid UTF-8";
    } else {
      try {
        const nlohmann::json j = nlohmann::json::parse(line);
        frost::v1::TrainingRow row;
        reason = check_training_row(j, range, &row);
        if (reason.empty()) *rows.add_rows() = std::move(row);
      } catch (const nlohmann::json::parse_error& e) {
        reason = absl::StrCat("not valid JSON (at byte ", e.byte, ")");
      } catch (const nlohmann::json::out_of_range&) {
        reason = "a number is out of range";  // e.g. 1e999
      } catch (const nlohmann::json::exception&) {
        reason = "not valid JSON";
      }
    }
    if (!reason.empty()) error = absl::StrCat(av(source), ":", line_number, ": ", reason);
  });
  if (!error.empty()) return absl::InvalidArgumentError(error);
  if (rows.rows_size() == 0) return absl::InvalidArgumentError(absl::StrCat(av(source), ": no rows"));
  return rows;
}

absl::StatusOr<std::pair<std::string, std::string>> parse_key_value(std::string_view arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat("expected key=value, got \"", av(arg), "\""));
  }
  return std::make_pair(std::string(arg.substr(0, eq)), std::string(arg.substr(eq + 1)));
}

std::string render_table(const std::vector<std::string>& headers,
                         const std::vector<std::vector<std::string>>& rows) {
  size_t columns = headers.size();
  for (const std::vector<std::string>& row : rows) columns = std::max(columns, row.size());
  std::vector<size_t> widths(columns, 0);
  auto measure = [&widths](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], utf8_length(row[c]));
  };
  measure(headers);
  for (const std::vector<std::string>& row : rows) measure(row);

  std::string out;
  auto append_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < columns; ++c) {
      const std::string_view cell = c < row.size() ? std::string_view(row[c]) : std::string_view();
      absl::StrAppend(&line, av(cell));
      if (c + 1 < columns) line.append(widths[c] - utf8_length(cell) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&out, line, "\n");
  };
  append_row(headers);
  for (const std::vector<std::string>& row : rows) append_row(row);
  return out;
}

std::string pretty_json(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::string(json);
  return j.dump(2, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace frost::ctl
