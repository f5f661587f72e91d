// Fuzz target: JSONL training rows, both readers:
//   - core/prototype/data.h parse_regression_jsonl: {"text", "label"[, "id"]} rows of the prototype datasets
//     and of SubmitJob's inline rows;
//   - core/train/repair_train.h load_text_jsonl: the "text" rows of the KV jobs' calib_path / test_path
//     files (it reads a path: the input is written to a tmpfs file per run).
// Promises checked: rejections are INVALID_ARGUMENT; accepted rows obey the row rules of data.h (valid
// UTF-8, not blank, label finite and inside the bounds, at most max_rows); rows written back with
// jobs::training_rows_jsonl() (how inline rows reach the validator) parse to the same rows; every
// load_text_jsonl text is valid UTF-8 and there are no more texts than lines.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/utf8.h"
#include "core/jobs/job_spec.h"
#include "core/prototype/data.h"
#include "core/train/repair_train.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  frost::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace frost;
  const std::string content(reinterpret_cast<const char*>(data), size);
  const prototype::LabelBounds bounds{-1.5, 2.5};
  prototype::DataLimits limits;
  limits.max_rows = 64;  // small limits, so that the fuzzer reaches them
  limits.max_text_bytes = 256;
  absl::StatusOr<prototype::RegressionData> rows = prototype::parse_regression_jsonl(content, "fuzz.jsonl", bounds, limits);
  if (!rows.ok()) {
    fuzz::check_rejection(rows.status());
  } else {
    const prototype::RegressionData& d = *rows;
    FROST_FUZZ_CHECK(d.size() >= 1 && d.size() <= limits.max_rows, "row count outside [1, max_rows]");
    FROST_FUZZ_CHECK(d.labels.size() == d.texts.size() && d.ids.size() == d.texts.size(), "column sizes differ");
    std::vector<jobs::TrainingRow> back;
    for (int64_t i = 0; i < d.size(); ++i) {
      const std::string& t = d.texts[static_cast<size_t>(i)];
      const float l = d.labels[static_cast<size_t>(i)];
      FROST_FUZZ_CHECK(!t.empty() && static_cast<int64_t>(t.size()) <= limits.max_text_bytes, "text size");
      FROST_FUZZ_CHECK(is_valid_utf8(t), "text is not valid UTF-8");
      FROST_FUZZ_CHECK(std::isfinite(l) && l >= static_cast<float>(bounds.a) && l <= static_cast<float>(bounds.b),
                       "label outside the bounds");
      FROST_FUZZ_CHECK(is_valid_utf8(d.ids[static_cast<size_t>(i)]), "id is not valid UTF-8");
      back.push_back({t, static_cast<double>(l), d.ids[static_cast<size_t>(i)]});
    }
    const std::string jsonl = jobs::training_rows_jsonl(back);
    absl::StatusOr<prototype::RegressionData> again =
        prototype::parse_regression_jsonl(jsonl, "inline_rows", bounds, limits);
    FROST_FUZZ_CHECK(again.ok(), "rows written back are refused: " + again.status().ToString());
    FROST_FUZZ_CHECK(again->texts == d.texts && again->labels == d.labels && again->ids == d.ids,
                     "rows changed in a write/parse round trip");
  }

  const std::string path = fuzz::fuzz_dir().write("text.jsonl", content);
  absl::StatusOr<std::vector<std::string>> texts = load_text_jsonl(path);
  if (!texts.ok()) {
    fuzz::check_rejection(texts.status());
    return 0;
  }
  const size_t lines = static_cast<size_t>(std::count(content.begin(), content.end(), '\n')) + 1;
  FROST_FUZZ_CHECK(texts->size() <= lines, "more texts than lines");
  for (const std::string& t : *texts) FROST_FUZZ_CHECK(is_valid_utf8(t), "text is not valid UTF-8");
  return 0;
}
