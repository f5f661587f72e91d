// load_text_jsonl (declared in core/train/repair_train.h): its own translation unit, so that a reader of
// untrusted JSONL links without the training code (tests/fuzz/jsonl_rows_fuzz.cc).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/json.h"
#include "core/common/status_macros.h"
#include "core/common/utf8.h"
#include "core/train/repair_train.h"

namespace frost {

absl::StatusOr<std::vector<std::string>> load_text_jsonl(const std::string& path, int64_t max_bytes) {
  FROST_ASSIGN_OR_RETURN(std::string content, read_file(path, max_bytes));
  std::vector<std::string> out;
  size_t start = 0;
  int64_t line_no = 0;
  while (start < content.size()) {
    size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    const std::string_view line(content.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j;
    if (std::optional<std::string> err = parse_json_bounded(line, 16, &j))
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", *err));
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": expected an object with a string \"text\""));
    std::string text = j["text"].get<std::string>();
    if (!is_valid_utf8(text))
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": text is not UTF-8"));
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace frost
