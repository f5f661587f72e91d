#pragma once
// Typed access to a config.json object, shared by core/model/model_config.cc and model_families.cc (internal to
// core/model). Errors are INVALID_ARGUMENT "<label>: <field> ...".
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace frost::hf_config {

using json = nlohmann::json;

// A field that is null counts as absent (HF writes null for "use the default").
class Fields {
 public:
  Fields(const json& j, std::string label) : j_(j), label_(std::move(label)) {}

  absl::Status error(const std::string& field, const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat(label_, ": ", field, " ", msg));
  }
  const std::string& label() const { return label_; }

  bool has(const char* field) const {
    auto it = j_.find(field);
    return it != j_.end() && !it->is_null();
  }
  // Present, null or not (HF: an explicit null can mean "off" where the default is on, e.g. Gemma 2's softcaps).
  bool present(const char* field) const { return j_.find(field) != j_.end(); }
  const json* get(const char* field) const {
    auto it = j_.find(field);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  absl::Status req_int(const char* field, int64_t* out) const {
    if (!has(field)) return error(field, "is missing");
    return opt_int(field, out);
  }
  // Leaves *out unchanged when absent.
  absl::Status opt_int(const char* field, int64_t* out) const {
    const json* v = get(field);
    if (v == nullptr) return absl::OkStatus();
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return error(field, absl::StrCat("is out of range, got ", v->dump()));
      }
      *out = static_cast<int64_t>(u);
      return absl::OkStatus();
    }
    if (v->is_number_integer()) {
      *out = v->get<int64_t>();
      return absl::OkStatus();
    }
    return error(field, absl::StrCat("must be an integer, got ", v->dump()));
  }
  absl::Status opt_double(const char* field, double* out) const {
    const json* v = get(field);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) return error(field, absl::StrCat("must be a number, got ", v->dump()));
    *out = v->get<double>();
    return absl::OkStatus();
  }
  absl::Status opt_bool(const char* field, bool* out) const {
    const json* v = get(field);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) return error(field, absl::StrCat("must be true or false, got ", v->dump()));
    *out = v->get<bool>();
    return absl::OkStatus();
  }
  absl::Status opt_string(const char* field, std::string* out) const {
    const json* v = get(field);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_string()) return error(field, absl::StrCat("must be a string, got ", v->dump()));
    *out = v->get<std::string>();
    return absl::OkStatus();
  }
  // A token id: absent → -1.
  absl::Status opt_token_id(const char* field, int32_t* out) const {
    int64_t v = -1;
    if (absl::Status s = opt_int(field, &v); !s.ok()) return s;
    if (v < -1 || v > std::numeric_limits<int32_t>::max()) {
      return error(field, absl::StrCat("is out of range, got ", v));
    }
    *out = static_cast<int32_t>(v);
    return absl::OkStatus();
  }
  // eos_token_id: an integer or a list of integers (absent → empty).
  absl::Status opt_token_ids(const char* field, std::vector<int32_t>* out) const {
    const json* v = get(field);
    if (v == nullptr) return absl::OkStatus();
    std::vector<json> items = v->is_array() ? v->get<std::vector<json>>() : std::vector<json>{*v};
    for (const json& item : items) {
      if (!item.is_number_integer() || item.get<int64_t>() < 0 ||
          item.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return error(field, absl::StrCat("must be a non-negative integer or a list of them, got ", v->dump()));
      }
      out->push_back(static_cast<int32_t>(item.get<int64_t>()));
    }
    return absl::OkStatus();
  }

 private:
  const json& j_;
  std::string label_;
};

#define FROST_CFG_TRY(expr)                       \
  do {                                            \
    if (absl::Status s_ = (expr); !s_.ok()) {     \
      return s_;                                  \
    }                                             \
  } while (0)

}  // namespace frost::hf_config
