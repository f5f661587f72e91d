#include "core/model/generation_config.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/common/fs.h"
#include "core/common/json.h"
#include "core/common/status_macros.h"

namespace frost {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxBytes = int64_t{1} << 20;
constexpr int kMaxDepth = 16;

}  // namespace

absl::StatusOr<GenerationDefaults> parse_generation_config(const std::string& text, const std::string& label,
                                                           int64_t n_vocab) {
  json j;
  if (std::optional<std::string> err = parse_json_bounded(text, kMaxDepth, &j))
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", *err));
  if (!j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(label, ": top level must be a JSON object, got ", j.type_name()));
  auto bad = [&](const char* field, const json& v, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", field, " must be ", what, ", got ", v.dump()));
  };
  // null counts as absent, as in config.json.
  auto get = [&](const char* field) -> const json* {
    auto it = j.find(field);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  GenerationDefaults g;
  if (const json* v = get("eos_token_id")) {
    const std::vector<json> items = v->is_array() ? v->get<std::vector<json>>() : std::vector<json>{*v};
    for (const json& item : items) {
      if (!item.is_number_integer() || item.get<int64_t>() < 0)
        return bad("eos_token_id", *v, "a non-negative integer or a list of them");
      if (item.get<int64_t>() >= n_vocab)
        return absl::InvalidArgumentError(absl::StrCat(label, ": eos_token_id ", item.get<int64_t>(),
                                                       " is beyond the model's ", n_vocab,
                                                       " embedding rows (config.json vocab_size)"));
      g.eos_ids.push_back(static_cast<int32_t>(item.get<int64_t>()));
    }
  }
  if (const json* v = get("do_sample")) {
    if (!v->is_boolean()) return bad("do_sample", *v, "true or false");
    g.do_sample = v->get<bool>();
  }
  auto number = [&](const char* field, bool (*ok)(double), const char* range,
                    std::optional<float>* out) -> absl::Status {
    const json* v = get(field);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number() || !ok(v->get<double>())) return bad(field, *v, range);
    *out = static_cast<float>(v->get<double>());
    return absl::OkStatus();
  };
  FROST_RETURN_IF_ERROR(number(
      "temperature", [](double x) { return std::isfinite(x) && x >= 0; }, "a number >= 0", &g.temperature));
  FROST_RETURN_IF_ERROR(number(
      "top_p", [](double x) { return x > 0 && x <= 1; }, "a number in (0, 1]", &g.top_p));
  FROST_RETURN_IF_ERROR(number(
      "repetition_penalty", [](double x) { return std::isfinite(x) && x > 0; }, "a number > 0",
      &g.repetition_penalty));
  if (const json* v = get("top_k")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 ||
        v->get<int64_t>() > std::numeric_limits<int32_t>::max())
      return bad("top_k", *v, "a non-negative integer (0 = off)");
    g.top_k = static_cast<int32_t>(v->get<int64_t>());
  }
  return g;
}

absl::StatusOr<GenerationDefaults> load_generation_config(const std::string& dir, int64_t n_vocab) {
  const std::string path = dir + "/" + kGenerationConfigName;
  absl::StatusOr<std::string> text = read_file(path, kMaxBytes);
  if (absl::IsNotFound(text.status())) return GenerationDefaults{};
  if (!text.ok()) return text.status();
  return parse_generation_config(*text, path, n_vocab);
}

}  // namespace frost
