// JSONL regression data: strict per-row validation, errors naming file, line, field and value.
#include "core/prototype/data.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/fs.h"
#include "core/common/json.h"
#include "core/common/number_text.h"
#include "core/common/status_macros.h"
#include "core/common/utf8.h"

namespace frost::prototype {
namespace {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;       // rows and meta.json are shallow; refuse pathological nesting
constexpr int kMaxListedBadRows = 10;   // bad rows quoted in the error message
constexpr size_t kMaxQuotedChars = 40;  // a quoted offending value is cut to this many bytes
constexpr int64_t kMaxMetaBytes = 16 << 20;

// The shortest text that reads back as the same double, so "7.5" prints as 7.5 and a value just above a
// bound does not print as the bound itself.
std::string fmt_num(double v) { return shortest_number_text(v); }

// A JSON value as it appears in the row, cut to at most kMaxQuotedChars bytes without splitting a
// UTF-8 sequence. The replace handler keeps dump() from throwing (parsed strings are valid anyway).
std::string quote(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMaxQuotedChars) {
    s.resize(utf8_valid_prefix(std::string_view(s).substr(0, kMaxQuotedChars)));
    s += "...";
  }
  return s;
}

// "an array", "a string", "null": the JSON type of `v` as a phrase.
std::string kind(const json& v) {
  if (v.is_null()) return "null";
  const std::string t = v.type_name();
  return absl::StrCat(t[0] == 'a' || t[0] == 'o' ? "an " : "a ", t);
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool all_space(std::string_view s) {
  for (char c : s) {
    if (!is_ascii_space(c)) return false;
  }
  return true;
}

// Parses JSON text; on failure returns the reason (no source prefix).
std::optional<std::string> parse_json(std::string_view text, json* out) {
  return parse_json_bounded(text, kMaxJsonDepth, out);
}

absl::Status validate_limits(const DataLimits& l, const std::string& source) {
  if (l.max_rows < 1 || l.max_text_bytes < 1 || l.max_file_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": data limits must be >= 1 (max_rows=", l.max_rows,
                     ", max_text_bytes=", l.max_text_bytes, ", max_file_bytes=", l.max_file_bytes, ")"));
  }
  return absl::OkStatus();
}

// The "text" rule: appends why `text` cannot be a row's text to `reasons` (`quoted`: the value as the row
// holds it).
void check_text(const std::string& text, const std::string& quoted, const DataLimits& limits,
                std::vector<std::string>* reasons) {
  if (text.empty()) {
    reasons->push_back("\"text\" is empty");
  } else if (all_space(text)) {
    reasons->push_back(absl::StrCat("\"text\" ", quoted, " is only whitespace"));
  } else if (static_cast<int64_t>(text.size()) > limits.max_text_bytes) {
    reasons->push_back(
        absl::StrCat("\"text\" is ", text.size(), " bytes, over max_text_bytes=", limits.max_text_bytes));
  } else if (size_t v = utf8_valid_prefix(text); v < text.size()) {
    // Unreachable with nlohmann (it validates strings and \u escapes); typed rows can carry any bytes.
    reasons->push_back(absl::StrCat("\"text\" is not valid UTF-8 (bad byte at offset ", v, ")"));
  }
}

// The "label" rule for a number.
void check_label(double label, const LabelBounds& bounds, std::vector<std::string>* reasons) {
  if (!std::isfinite(label)) {
    reasons->push_back(absl::StrCat("\"label\" ", fmt_num(label), " is not finite"));
  } else if (label < bounds.a || label > bounds.b) {
    reasons->push_back(absl::StrCat("\"label\" ", fmt_num(label), " is outside [", fmt_num(bounds.a), ", ",
                                    fmt_num(bounds.b), "]"));
  }
}

// The bad rows of one source: the first kMaxListedBadRows listed, then the total.
class BadRows {
 public:
  explicit BadRows(const std::string& source) : source_(source) {}
  void add(int64_t row, const std::vector<std::string>& reasons) {
    if (++n_bad_ <= kMaxListedBadRows)
      listed_.push_back(absl::StrCat(source_, ":", row, ": ", absl::StrJoin(reasons, "; ")));
  }
  absl::Status status() const {
    if (n_bad_ == 0) return absl::OkStatus();
    std::string msg = absl::StrJoin(listed_, "\n");
    if (n_bad_ > kMaxListedBadRows) absl::StrAppend(&msg, "\n(", n_bad_, " bad rows in total)");
    return absl::InvalidArgumentError(msg);
  }

 private:
  const std::string& source_;
  std::vector<std::string> listed_;
  int64_t n_bad_ = 0;
};

// Validates one non-blank line. Returns the reasons it is bad (empty when the row is good, in which
// case it is appended to `out`). At most one reason per field, so a row with a bad text and a bad
// label reports both.
std::vector<std::string> parse_row(std::string_view line, const LabelBounds& bounds, const DataLimits& limits,
                                   RegressionData* out) {
  // nlohmann rejects invalid UTF-8 too, but with a message about JSON; say what is wrong instead.
  const size_t valid = utf8_valid_prefix(line);
  if (valid < line.size())
    return {absl::StrCat("not valid UTF-8 (bad byte at offset ", valid, " of the line)")};
  json row;
  if (auto err = parse_json(line, &row)) return {*err};
  if (!row.is_object()) return {absl::StrCat("row is ", kind(row), ", not a JSON object")};

  std::vector<std::string> reasons;
  std::string text;
  auto t = row.find("text");
  if (t == row.end()) {
    reasons.push_back("\"text\" is missing");
  } else if (!t->is_string()) {
    reasons.push_back(absl::StrCat("\"text\" ", quote(*t), " is ", kind(*t), ", not a string"));
  } else {
    text = t->get<std::string>();
    check_text(text, quote(*t), limits, &reasons);
  }

  double label = 0;
  auto l = row.find("label");
  if (l == row.end()) {
    reasons.push_back("\"label\" is missing");
  } else if (!l->is_number()) {  // is_number() is false for booleans and strings like "3.5"
    reasons.push_back(absl::StrCat("\"label\" ", quote(*l), " is ", kind(*l), ", not a number"));
  } else {
    label = l->get<double>();
    check_label(label, bounds, &reasons);
  }
  if (!reasons.empty()) return reasons;

  std::string id;
  if (auto it = row.find("id"); it != row.end() && it->is_string()) id = it->get<std::string>();
  out->texts.push_back(std::move(text));
  out->labels.push_back(static_cast<float>(label));
  out->ids.push_back(std::move(id));
  return {};
}

absl::StatusOr<json> load_json_object(const std::string& path) {
  FROST_ASSIGN_OR_RETURN(std::string text, read_file(path, kMaxMetaBytes, "the meta.json limit"));
  json j;
  if (auto err = parse_json(text, &j)) return absl::InvalidArgumentError(absl::StrCat(path, ": ", *err));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": top level is ", kind(j), ", not a JSON object"));
  }
  return j;
}

absl::StatusOr<LabelBounds> bounds_from_meta(const json& meta, const std::string& path) {
  LabelBounds b;
  for (auto [field, dst] : {std::pair<const char*, double*>{"label_min", &b.a}, {"label_max", &b.b}}) {
    auto it = meta.find(field);
    if (it == meta.end())
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"", field, "\" is missing"));
    if (!it->is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": \"", field, "\" ", quote(*it), " is ", kind(*it), ", not a number"));
    }
    *dst = it->get<double>();
  }
  if (absl::Status s = validate_bounds(b); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  return b;
}

std::string basename_of(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

}  // namespace

absl::Status validate_bounds(const LabelBounds& bounds) {
  if (!std::isfinite(bounds.a) || !std::isfinite(bounds.b)) {
    return absl::InvalidArgumentError(
        absl::StrCat("label bounds: a=", fmt_num(bounds.a), " and b=", fmt_num(bounds.b), " must be finite"));
  }
  if (!(bounds.a < bounds.b)) {
    return absl::InvalidArgumentError(
        absl::StrCat("label bounds: a=", fmt_num(bounds.a), " must be < b=", fmt_num(bounds.b)));
  }
  return absl::OkStatus();
}

absl::StatusOr<RegressionData> parse_regression_jsonl(std::string_view content, const std::string& source,
                                                      const LabelBounds& bounds, const DataLimits& limits) {
  FROST_RETURN_IF_ERROR(validate_limits(limits, source));
  if (absl::Status s = validate_bounds(bounds); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  if (static_cast<int64_t>(content.size()) > limits.max_file_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", content.size(), " bytes is larger than max_file_bytes=", limits.max_file_bytes));
  }
  RegressionData data;
  BadRows bad(source);
  int64_t n_rows = 0, line_no = 0;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (all_space(line)) continue;
    if (++n_rows > limits.max_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": more than max_rows=", limits.max_rows, " rows"));
    }
    std::vector<std::string> reasons = parse_row(line, bounds, limits, &data);
    if (!reasons.empty()) bad.add(line_no, reasons);
  }
  FROST_RETURN_IF_ERROR(bad.status());
  if (data.size() == 0) return absl::InvalidArgumentError(absl::StrCat(source, ": no rows"));
  return data;
}

absl::StatusOr<RegressionData> check_regression_rows(const std::vector<RegressionRow>& rows,
                                                     const std::string& source, const LabelBounds& bounds,
                                                     const DataLimits& limits) {
  FROST_RETURN_IF_ERROR(validate_limits(limits, source));
  if (absl::Status s = validate_bounds(bounds); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  if (static_cast<int64_t>(rows.size()) > limits.max_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", limits.max_rows + 1, ": more than max_rows=", limits.max_rows, " rows"));
  }
  RegressionData data;
  BadRows bad(source);
  for (size_t i = 0; i < rows.size(); ++i) {
    const RegressionRow& r = rows[i];
    std::vector<std::string> reasons;
    check_text(r.text, quote(json(r.text)), limits, &reasons);
    check_label(r.label, bounds, &reasons);
    if (!reasons.empty()) {
      bad.add(static_cast<int64_t>(i) + 1, reasons);
      continue;
    }
    data.texts.push_back(r.text);
    data.labels.push_back(static_cast<float>(r.label));
    data.ids.push_back(r.id);
  }
  FROST_RETURN_IF_ERROR(bad.status());
  if (data.size() == 0) return absl::InvalidArgumentError(absl::StrCat(source, ": no rows"));
  return data;
}

absl::StatusOr<RegressionData> load_regression_jsonl(const std::string& path, const LabelBounds& bounds,
                                                     const DataLimits& limits) {
  FROST_RETURN_IF_ERROR(validate_limits(limits, path));
  FROST_ASSIGN_OR_RETURN(std::string content, read_file(path, limits.max_file_bytes, "max_file_bytes"));
  return parse_regression_jsonl(content, path, bounds, limits);
}

absl::StatusOr<LabelBounds> load_meta_bounds(const std::string& meta_json_path) {
  FROST_ASSIGN_OR_RETURN(json meta, load_json_object(meta_json_path));
  return bounds_from_meta(meta, meta_json_path);
}

absl::StatusOr<DatasetDir> load_dataset_dir(const std::string& dir,
                                            std::optional<LabelBounds> bounds_override) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(dir, ": no such dataset directory"));
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory"));

  DatasetDir out;
  out.name = basename_of(dir);
  const std::string meta_path = dir + "/meta.json";
  // meta.json is required only when it is the source of the bounds.
  const bool have_meta = stat(meta_path.c_str(), &st) == 0;
  if (!have_meta && !bounds_override) {
    return absl::NotFoundError(absl::StrCat(meta_path, ": no such file (needed for the label bounds)"));
  }
  if (have_meta) {
    FROST_ASSIGN_OR_RETURN(json meta, load_json_object(meta_path));
    if (auto it = meta.find("name"); it != meta.end() && it->is_string() && !it->get<std::string>().empty()) {
      out.name = it->get<std::string>();
    }
    if (!bounds_override) {
      FROST_ASSIGN_OR_RETURN(out.bounds, bounds_from_meta(meta, meta_path));
    }
  }
  if (bounds_override) {
    if (absl::Status s = validate_bounds(*bounds_override); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": bounds override: ", s.message()));
    }
    out.bounds = *bounds_override;
  }
  FROST_ASSIGN_OR_RETURN(out.train, load_regression_jsonl(dir + "/train.jsonl", out.bounds));
  FROST_ASSIGN_OR_RETURN(out.test, load_regression_jsonl(dir + "/test.jsonl", out.bounds));
  return out;
}

}  // namespace frost::prototype
