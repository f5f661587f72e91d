#include "core/prototype/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace frost::proto {

// One row per field: the name users write in --set / JSON and the member it sets.
#define FROST_PROTO_INT_FIELDS(X)                                                                          \
  X(max_tokens)                                                                                            \
  X(d_h) X(m) X(m_q) X(K) X(T) X(L) X(H) X(ffn_mult) X(epochs_a) X(epochs_b) X(batch_size) X(label_hidden) \
      X(eval_batch) X(rlcs_k) X(feature_cache_bytes)
#define FROST_PROTO_DOUBLE_FIELDS(X)                                                                \
  X(huber_delta)                                                                                    \
  X(tau_start) X(tau_end) X(lambda_emb) X(lambda_ov) X(lambda_rep) X(m_cos) X(lr) X(weight_decay)   \
      X(grad_clip) X(norm_eps) X(gumbel_eps) X(restr_norm_eps) X(restr_alpha_max) X(restr_beta_max) \
          X(ood_quantile) X(key_bias) X(label_flip_p) X(val_fraction) X(probe_margin) X(restr_guard_weight) \
              X(restr_train_eps)

namespace {

absl::Status bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("prototype config: ", field, " ", why));
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s[0] == '-') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

absl::Status validate(const PrototypeConfig& c) {
  auto pos = [](const char* f, int64_t v) -> absl::Status {
    if (v < 1) return bad(f, absl::StrCat("must be >= 1, got ", v));
    return absl::OkStatus();
  };
  for (auto [f, v] : {std::pair<const char*, int64_t>{"max_tokens", c.max_tokens},
                      {"d_h", c.d_h},
                      {"m", c.m},
                      {"m_q", c.m_q},
                      {"K", c.K},
                      {"T", c.T},
                      {"L", c.L},
                      {"H", c.H},
                      {"ffn_mult", c.ffn_mult},
                      {"batch_size", c.batch_size},
                      {"label_hidden", c.label_hidden},
                      {"eval_batch", c.eval_batch},
                      {"rlcs_k", c.rlcs_k}}) {
    if (absl::Status s = pos(f, v); !s.ok()) return s;
  }
  if (c.max_tokens < 2) return bad("max_tokens", absl::StrCat("must be >= 2, got ", c.max_tokens));
  if (c.d_h % c.H != 0) return bad("d_h", absl::StrCat("(", c.d_h, ") must be divisible by H (", c.H, ")"));
  if (c.K < 2)
    return bad("K", absl::StrCat("must be >= 2 (the overlap and repulsion losses average pairs), got ", c.K));
  if (c.T < c.K)
    return bad("T", absl::StrCat("(", c.T, ") must be >= K (", c.K,
                                 "): every slot needs an available candidate after K-1 picks"));
  if (c.epochs_a < 0) return bad("epochs_a", absl::StrCat("must be >= 0, got ", c.epochs_a));
  if (c.epochs_b < 0) return bad("epochs_b", absl::StrCat("must be >= 0, got ", c.epochs_b));
  if (c.huber_delta <= 0) return bad("huber_delta", absl::StrCat("must be > 0, got ", c.huber_delta));
  if (!(c.tau_start > 0) || !(c.tau_end > 0))
    return bad("tau_start/tau_end", absl::StrCat("must be > 0, got ", c.tau_start, "/", c.tau_end));
  for (auto [f, v] : {std::pair<const char*, double>{"lambda_emb", c.lambda_emb},
                      {"lambda_ov", c.lambda_ov},
                      {"lambda_rep", c.lambda_rep},
                      {"weight_decay", c.weight_decay},
                      {"restr_norm_eps", c.restr_norm_eps},
                      {"key_bias", c.key_bias}}) {
    if (v < 0) return bad(f, absl::StrCat("must be >= 0, got ", v));
  }
  if (c.m_cos < -1 || c.m_cos > 1) return bad("m_cos", absl::StrCat("must be in [-1, 1], got ", c.m_cos));
  if (!(c.lr > 0)) return bad("lr", absl::StrCat("must be > 0, got ", c.lr));
  if (!(c.grad_clip >= 0)) return bad("grad_clip", absl::StrCat("must be >= 0 (0 = off), got ", c.grad_clip));
  if (!(c.norm_eps > 0) || !(c.gumbel_eps > 0)) return bad("norm_eps/gumbel_eps", "must be > 0");
  if (c.restr_alpha_max < 0 || c.restr_alpha_max > 1)
    return bad("restr_alpha_max", absl::StrCat("must be in [0, 1], got ", c.restr_alpha_max));
  if (c.restr_beta_max < 0 || c.restr_beta_max > 1)
    return bad("restr_beta_max", absl::StrCat("must be in [0, 1], got ", c.restr_beta_max));
  if (c.ood_quantile < 0 || c.ood_quantile >= 1)
    return bad("ood_quantile", absl::StrCat("must be in [0, 1), got ", c.ood_quantile));
  if (c.label_flip_p < 0 || c.label_flip_p > 1)
    return bad("label_flip_p", absl::StrCat("must be in [0, 1], got ", c.label_flip_p));
  if (c.probe != "ridge" && c.probe != "none")
    return bad("probe", absl::StrCat("must be 'ridge' or 'none', got '", c.probe, "'"));
  if (c.val_fraction < 0 || c.val_fraction > 0.5)
    return bad("val_fraction", absl::StrCat("must be in [0, 0.5], got ", c.val_fraction));
  if (c.probe_margin < 0) return bad("probe_margin", absl::StrCat("must be >= 0, got ", c.probe_margin));
  if (c.restr_guard_weight < 0)
    return bad("restr_guard_weight", absl::StrCat("must be >= 0, got ", c.restr_guard_weight));
  if (c.restr_train_eps < 0)
    return bad("restr_train_eps", absl::StrCat("must be >= 0, got ", c.restr_train_eps));
  if (c.slot_init != "kmeans++" && c.slot_init != "normal")
    return bad("slot_init", absl::StrCat("must be 'kmeans++' or 'normal', got '", c.slot_init, "'"));
  if (c.feature_cache_bytes < 0)
    return bad("feature_cache_bytes", absl::StrCat("must be >= 0, got ", c.feature_cache_bytes));
  // Sizes that would not fit any machine are refused before allocation.
  if (c.d_h > 8192 || c.m > 1024 || c.m_q > 1024 || c.K > 65536 || c.T > 1'000'000 || c.L > 64 || c.H > 256 ||
      c.ffn_mult > 64 || c.max_tokens > 1'000'000 || c.label_hidden > 65536)
    return bad("sizes", "exceed the supported limits (d_h<=8192, m,m_q<=1024, K<=65536, L<=64, H<=256)");
  return absl::OkStatus();
}

absl::Status set_field(PrototypeConfig& c, const std::string& key, const std::string& value) {
#define FROST_SET_INT(name)                                                                              \
  if (key == #name) {                                                                                    \
    int64_t v = 0;                                                                                       \
    if (!parse_int(value, &v)) return bad(#name, absl::StrCat("must be an integer, got '", value, "'")); \
    c.name = v;                                                                                          \
    return absl::OkStatus();                                                                             \
  }
#define FROST_SET_DOUBLE(name)                                                       \
  if (key == #name) {                                                                \
    double v = 0;                                                                    \
    if (!parse_double(value, &v))                                                    \
      return bad(#name, absl::StrCat("must be a finite number, got '", value, "'")); \
    c.name = v;                                                                      \
    return absl::OkStatus();                                                         \
  }
  FROST_PROTO_INT_FIELDS(FROST_SET_INT)
  FROST_PROTO_DOUBLE_FIELDS(FROST_SET_DOUBLE)
#undef FROST_SET_INT
#undef FROST_SET_DOUBLE
  if (key == "seed") {
    if (!parse_u64(value, &c.seed))
      return bad("seed", absl::StrCat("must be an unsigned integer, got '", value, "'"));
    return absl::OkStatus();
  }
  if (key == "slot_init") {
    c.slot_init = value;
    return absl::OkStatus();
  }
  if (key == "probe") {
    c.probe = value;
    return absl::OkStatus();
  }
  if (key == "spill_dir") {
    c.spill_dir = value;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("prototype config: unknown field '", key, "'"));
}

absl::Status set_fields(PrototypeConfig& c, const std::vector<std::string>& kvs) {
  for (const std::string& kv : kvs) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return absl::InvalidArgumentError(absl::StrCat("prototype config: '", kv, "' is not key=value"));
    if (absl::Status s = set_field(c, kv.substr(0, eq), kv.substr(eq + 1)); !s.ok()) return s;
  }
  return validate(c);
}

nlohmann::json to_json(const PrototypeConfig& c) {
  nlohmann::json j;
#define FROST_TO_JSON(name) j[#name] = c.name;
  FROST_PROTO_INT_FIELDS(FROST_TO_JSON)
  FROST_PROTO_DOUBLE_FIELDS(FROST_TO_JSON)
#undef FROST_TO_JSON
  j["seed"] = c.seed;
  j["slot_init"] = c.slot_init;
  j["probe"] = c.probe;
  j["spill_dir"] = c.spill_dir;
  return j;
}

absl::StatusOr<PrototypeConfig> config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("prototype config: not a JSON object");
  PrototypeConfig c;
  for (const auto& [key, v] : j.items()) {
    std::string value;
    if (v.is_string()) {
      value = v.get<std::string>();
    } else if (v.is_number_integer() || v.is_number_unsigned() || v.is_number_float()) {
      value = v.is_number_float() ? absl::StrFormat("%.17g", v.get<double>()) : v.dump();
    } else {
      return bad(key, absl::StrCat("has an unsupported JSON type: ", v.dump()));
    }
    if (absl::Status s = set_field(c, key, value); !s.ok()) return s;
  }
  if (absl::Status s = validate(c); !s.ok()) return s;
  return c;
}

double tau_for_epoch(const PrototypeConfig& c, int64_t epoch) {
  if (c.epochs_b <= 1) return c.tau_start;
  double f = static_cast<double>(epoch - 1) / static_cast<double>(c.epochs_b - 1);
  return c.tau_start - f * (c.tau_start - c.tau_end);
}

}  // namespace frost::proto
