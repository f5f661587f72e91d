#include "server/openai_sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"

namespace frost::server::openai {
namespace {

using json = nlohmann::json;

// Where the OpenAI body differs from sampling_params_table(): one entry per body key that is not simply a
// row under its own name. A row with no entry here is read under its own name, the table's range and words
// as they are (top_p, min_p, repetition_penalty, presence_penalty and frequency_penalty, whose table range
// is OpenAI's [-2, 2] already, ignore_eos).
struct BodyField {
  std::string key;                   // the body's key
  std::string row;                   // the row it sets (a later key of the same row wins)
  bool chat_only = false;            // a key only chat completions knows (completions refuses it as unknown)
  std::optional<ConfigRange> range;  // the body's own range, checked before the row's
  int32_t SamplingLimits::*cap = nullptr;                   // the range's upper end from the server's limits
  const char* cap_name = "";                                // ... named in the message
  std::vector<std::pair<std::string, std::string>> values;  // a body value read as the row's value
  bool int64_bits = false;  // any int64, read as the uint64 of its two's complement bits
};

const std::vector<BodyField>& body_fields() {
  // One row of data per difference (clang-format would spread the long rows over eight lines each).
  // clang-format off
  //  key, row, chat_only, range, cap, cap_name, values, int64_bits
  static const std::vector<BodyField> fields = {
      // OpenAI's temperature stops at 2; frost's own (gRPC, flags) does not.
      {"temperature", "temperature", false, ConfigRange::in(0, 2), nullptr, "", {}, false},
      // vLLM's "off".
      {"top_k", "top_k", false, std::nullopt, nullptr, "", {{"-1", "0"}}, false},
      // The SDKs' seed is an int64 (vLLM's range): a negative one is a seed like any other.
      {"seed", "seed", false, std::nullopt, nullptr, "", {}, true},
      // OpenAI's names for max_new_tokens, bounded by the server's limit.
      {"max_tokens", "max_new_tokens", false, ConfigRange::at_least(1), &SamplingLimits::max_new_tokens,
       "limits.max_new_tokens", {}, false},
      {"max_completion_tokens", "max_new_tokens", true, ConfigRange::at_least(1),
       &SamplingLimits::max_new_tokens, "limits.max_new_tokens", {}, false},
  };
  // clang-format on
  return fields;
}

// The body fields that set `row` at `ep`: its entries above, or the row under its own name.
std::vector<BodyField> fields_of(const std::string& row, Endpoint ep) {
  std::vector<BodyField> out;
  bool listed = false;
  for (const BodyField& f : body_fields()) {
    if (f.row != row) continue;
    listed = true;
    if (!f.chat_only || ep == Endpoint::kChat) out.push_back(f);
  }
  if (!listed) out.push_back(BodyField{row, row, false, std::nullopt, nullptr, "", {}, false});
  return out;
}

bool by_hand(const std::string& row) {
  const std::vector<std::string>& h = sampling_rows_by_hand();
  return std::find(h.begin(), h.end(), row) != h.end();
}

// A JSON value as the row's FieldInput: strings only for string rows, numbers and booleans only for the
// others (FieldInput::Form), numbers by their exact text. An integral float is an integer (5.0 is 5, as
// the SDKs may send it); a JSON integer beyond int64 is out of range (the body's integers are int64).
std::variant<FieldInput, std::string> body_input(const json& v, FieldKind kind) {
  FieldInput in;
  in.shown = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (in.shown.size() > 60) in.shown = absl::StrCat(in.shown.substr(0, 57), "...");
  if (v.is_string()) {
    in.form = FieldInput::Form::kString;
    in.text = v.get<std::string>();
  } else if (v.is_boolean()) {
    in.form = FieldInput::Form::kNumber;
    in.text = v.get<bool>() ? "true" : "false";
  } else if (v.is_number_unsigned() &&
             v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::StrCat("out of range, got ", in.shown);
  } else if (v.is_number_float() && kind == FieldKind::kInt) {
    const double d = v.get<double>();
    in.form = FieldInput::Form::kNumber;
    in.text = d == std::trunc(d) && std::fabs(d) <= 9e15 ? std::to_string(static_cast<int64_t>(d)) : in.shown;
  } else if (v.is_number()) {
    in.form = FieldInput::Form::kNumber;
    in.text = in.shown;  // nlohmann's shortest text, read back as the same double
  } else {
    in.form = FieldInput::Form::kOther;
  }
  return in;
}

}  // namespace

const std::vector<std::string>& sampling_rows_by_hand() {
  static const std::vector<std::string> rows = {"logprobs"};
  return rows;
}

std::vector<std::string> sampling_body_keys(Endpoint ep) {
  std::vector<std::string> keys;
  for (const ConfigField<SamplingParams>& row : sampling_params_table().fields()) {
    if (by_hand(row.name)) continue;
    for (const BodyField& f : fields_of(row.name, ep)) keys.push_back(f.key);
  }
  return keys;
}

std::optional<ApiError> read_sampling(Endpoint ep, const json& body, const LimitsSection& limits,
                                      SamplingParams* p, std::set<std::string>* given) {
  const ConfigTable<SamplingParams>& table = sampling_params_table();
  for (const ConfigField<SamplingParams>& row : table.fields()) {
    if (by_hand(row.name)) continue;
    for (const BodyField& f : fields_of(row.name, ep)) {
      auto it = body.find(f.key);
      if (it == body.end() || it->is_null()) continue;
      std::variant<FieldInput, std::string> read = body_input(*it, row.kind);
      if (const std::string* why = std::get_if<std::string>(&read))
        return bad_request(f.key, absl::StrCat(f.key, ": ", *why));
      FieldInput& in = std::get<FieldInput>(read);
      for (const auto& [from, to] : f.values)
        if (in.form == FieldInput::Form::kNumber && in.text == from) in.text = to;
      int64_t i = 0;
      if (f.int64_bits && in.form == FieldInput::Form::kNumber && absl::SimpleAtoi(in.text, &i) && i < 0)
        in.text = std::to_string(static_cast<uint64_t>(i));
      double d = 0;
      if (f.range && in.form == FieldInput::Form::kNumber && absl::SimpleAtod(in.text, &d)) {
        ConfigRange r = *f.range;
        if (f.cap != nullptr) r.hi = limits.*f.cap;
        const std::string cap = f.cap != nullptr ? absl::StrCat(" (", f.cap_name, ")") : "";
        if (!r.contains(d))
          return bad_request(f.key, absl::StrCat(f.key, ": ", r.describe(), cap, ", got ", in.text));
      }
      if (absl::Status s = table.apply_as(*p, row.name, in, f.key); !s.ok())
        return bad_request(f.key, std::string(s.message()));
      given->insert(row.name);
    }
  }
  return std::nullopt;
}

}  // namespace frost::server::openai
