#pragma once
// Regression datasets for the prototype evaluation: JSONL rows {"text": "...", "label": <number>}.
//
// Every row is checked and bad rows are refused, never silently dropped or clamped: one bad row
// fails the whole file with INVALID_ARGUMENT listing the first few bad rows as
// "<source>:<line>: <reason>", so a broken dataset is fixed at its source instead of evaluated
// on a quietly different subset.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost::prototype {

// The closed label range [a, b] of a dataset (meta.json "label_min" / "label_max").
struct LabelBounds {
  double a = 0;
  double b = 1;
};

// Rows in file order. The three vectors have the same length.
struct RegressionData {
  std::vector<std::string> texts;  // valid UTF-8, not empty or whitespace-only
  std::vector<float> labels;       // finite, inside the bounds the data was loaded with
  std::vector<std::string> ids;    // the row's "id" when it is a JSON string, "" otherwise
  int64_t size() const { return static_cast<int64_t>(texts.size()); }
};

// Limits that refuse absurd inputs before they are held in memory. All must be >= 1.
struct DataLimits {
  int64_t max_rows = 1'000'000;        // non-blank lines per file
  int64_t max_text_bytes = 1 << 20;    // bytes of one row's "text" (after JSON unescaping)
  int64_t max_file_bytes = 1ll << 31;  // bytes of the whole file / content
};

// OK when a < b and both are finite; INVALID_ARGUMENT "label bounds: ..." otherwise.
absl::Status validate_bounds(const LabelBounds& bounds);

// Parses JSONL `content`; `source` names it in messages (e.g. "train.jsonl" or a path).
// Row rules (each violation is a bad row):
//   - the line is valid UTF-8 and valid JSON, and the value is an object;
//   - "text" is present, a string, not empty or only ASCII whitespace, at most max_text_bytes;
//   - "label" is present, a number (not a bool or string), finite, and a <= label <= b;
//   - other fields are ignored ("id" is kept when it is a string).
// Lines holding only whitespace are skipped (they still count for the 1-based line numbers);
// a trailing "\r" (CRLF files) is ignored. Errors, all INVALID_ARGUMENT:
//   - bad rows: the first 10 as "<source>:<line>: <reason>", one per message line, followed by
//     "(N bad rows in total)" when there are more than 10;
//   - no rows at all: "<source>: no rows";
//   - a DataLimits limit exceeded: the message names the limit (e.g. "max_rows=1000000").
absl::StatusOr<RegressionData> parse_regression_jsonl(std::string_view content, const std::string& source,
                                                      const LabelBounds& bounds,
                                                      const DataLimits& limits = {});

// A row that arrives as a value (a training request's inline rows) rather than as JSONL text.
struct RegressionRow {
  std::string text;
  double label = 0;
  std::string id;  // "" = none
};

// The row rules of parse_regression_jsonl for rows that are already typed (only the "text" and "label" rules
// can fail): row n (1-based) is bad as "<source>:<n>: <reason>", with the same reasons, the same listing of
// the first 10, "<source>: no rows", and the max_rows / max_text_bytes limits.
absl::StatusOr<RegressionData> check_regression_rows(const std::vector<RegressionRow>& rows,
                                                     const std::string& source, const LabelBounds& bounds,
                                                     const DataLimits& limits = {});

// Reads `path` and parses it with source = path. NOT_FOUND when the file does not exist,
// INVALID_ARGUMENT when it is not a regular file or is larger than limits.max_file_bytes.
absl::StatusOr<RegressionData> load_regression_jsonl(const std::string& path, const LabelBounds& bounds,
                                                     const DataLimits& limits = {});

// Reads "label_min" / "label_max" (numbers) from a dataset's meta.json and validates them.
absl::StatusOr<LabelBounds> load_meta_bounds(const std::string& meta_json_path);

// A dataset directory: train.jsonl, test.jsonl and meta.json.
struct DatasetDir {
  std::string name;  // meta.json "name" when it is a non-empty string, else the directory's basename
  LabelBounds bounds;
  RegressionData train, test;
};

// Loads dir/train.jsonl and dir/test.jsonl against the label bounds of dir/meta.json, or against
// `bounds_override` when given (then meta.json is optional and only its "name" is used).
// NOT_FOUND when dir, a split file, or (without an override) meta.json is missing.
absl::StatusOr<DatasetDir> load_dataset_dir(const std::string& dir,
                                            std::optional<LabelBounds> bounds_override = std::nullopt);

}  // namespace frost::prototype
