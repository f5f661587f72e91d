#include "core/prototype/config.h"

#include "absl/strings/str_cat.h"
#include "core/common/config_fields.h"
#include "core/common/status_macros.h"

namespace frost::prototype {

namespace {

// The one table of PrototypeConfig's fields (core/common/config_fields.h): --set / JSON parsing, the known
// keys, the per-field ranges and to_json all come from it. Cross-field rules stay in validate().
std::vector<ConfigField<PrototypeConfig>> fields() {
  using C = PrototypeConfig;
  using R = ConfigRange;
  return {
      // --- seed defaults table; upper bounds: sizes that would not fit any machine are refused before
      // allocation ---
      int_field<C>("max_tokens", &C::max_tokens, R::in(2, 1'000'000)),
      int_field<C>("d_h", &C::d_h, R::in(1, 8192)),
      int_field<C>("m", &C::m, R::in(1, 1024)),
      int_field<C>("m_q", &C::m_q, R::in(1, 1024)),
      // K >= 2: the overlap and repulsion losses average pairs
      int_field<C>("K", &C::K, R::in(2, 65536)),
      int_field<C>("T", &C::T, R::in(1, 1'000'000)),
      int_field<C>("L", &C::L, R::in(1, 64)),
      int_field<C>("H", &C::H, R::in(1, 256)),
      int_field<C>("ffn_mult", &C::ffn_mult, R::in(1, 64)),
      number_field<C>("huber_delta", &C::huber_delta, R::above(0)),
      int_field<C>("epochs_a", &C::epochs_a, R::at_least(0)),
      int_field<C>("epochs_b", &C::epochs_b, R::at_least(0)),
      number_field<C>("tau_start", &C::tau_start, R::above(0)),
      number_field<C>("tau_end", &C::tau_end, R::above(0)),
      number_field<C>("lambda_emb", &C::lambda_emb, R::at_least(0)),
      number_field<C>("lambda_ov", &C::lambda_ov, R::at_least(0)),
      number_field<C>("lambda_rep", &C::lambda_rep, R::at_least(0)),
      number_field<C>("m_cos", &C::m_cos, R::in(-1, 1)),
      // --- choices the seed leaves open ---
      int_field<C>("batch_size", &C::batch_size, R::at_least(1)),
      number_field<C>("lr", &C::lr, R::above(0)),
      number_field<C>("weight_decay", &C::weight_decay, R::at_least(0)),
      number_field<C>("grad_clip", &C::grad_clip, R::at_least(0)),  // 0 = off
      int_field<C>("label_hidden", &C::label_hidden, R::in(1, 65536)),
      number_field<C>("norm_eps", &C::norm_eps, R::above(0)),
      number_field<C>("gumbel_eps", &C::gumbel_eps, R::above(0)),
      int_field<C>("seed", &C::seed),
      number_field<C>("key_bias", &C::key_bias, R::at_least(0)),
      string_field<C>("slot_init", &C::slot_init, {"kmeans++", "normal"}),
      number_field<C>("label_flip_p", &C::label_flip_p, R::in(0, 1)),
      int_field<C>("eval_batch", &C::eval_batch, R::at_least(1)),
      string_field<C>("probe", &C::probe, {"ridge", "none"}),
      number_field<C>("val_fraction", &C::val_fraction, R::in(0, 0.5)),
      number_field<C>("probe_margin", &C::probe_margin, R::at_least(0)),
      // --- resTR + RLCS ---
      number_field<C>("restr_norm_eps", &C::restr_norm_eps, R::at_least(0)),
      number_field<C>("restr_alpha_max", &C::restr_alpha_max, R::in(0, 1)),
      number_field<C>("restr_beta_max", &C::restr_beta_max, R::in(0, 1)),
      int_field<C>("rlcs_k", &C::rlcs_k, R::at_least(1)),
      number_field<C>("ood_quantile", &C::ood_quantile, R{0, 1, false, true}),
      number_field<C>("restr_guard_weight", &C::restr_guard_weight, R::at_least(0)),
      number_field<C>("restr_train_eps", &C::restr_train_eps, R::at_least(0)),
      // --- feature cache ---
      int_field<C>("feature_cache_bytes", &C::feature_cache_bytes, R::at_least(0)),
      string_field<C>("spill_dir", &C::spill_dir),
  };
}

const ConfigTable<PrototypeConfig>& table() {
  static const ConfigTable<PrototypeConfig> t("prototype", fields());
  return t;
}

absl::Status bad(const std::string& field, const std::string& why) {
  return table().error(absl::StrCat(field, " ", why));
}

}  // namespace

absl::Status validate(const PrototypeConfig& c) {
  FROST_RETURN_IF_ERROR(table().check(c));
  if (c.d_h % c.H != 0) return bad("d_h", absl::StrCat("(", c.d_h, ") must be divisible by H (", c.H, ")"));
  if (c.T < c.K)
    return bad("T", absl::StrCat("(", c.T, ") must be >= K (", c.K,
                                 "): every slot needs an available candidate after K-1 picks"));
  return absl::OkStatus();
}

absl::Status set_field(PrototypeConfig& c, const std::string& key, const std::string& value) {
  return table().set(c, key, value);
}

absl::Status set_fields(PrototypeConfig& c, const std::vector<std::string>& kvs) {
  FROST_RETURN_IF_ERROR(table().set_all(c, kvs));
  return validate(c);
}

std::vector<std::string> config_keys() { return table().keys(); }

nlohmann::json to_json(const PrototypeConfig& c) { return table().to_json<nlohmann::json>(c); }

absl::StatusOr<PrototypeConfig> config_from_json(const nlohmann::json& j) {
  PrototypeConfig c;
  FROST_RETURN_IF_ERROR(table().set_json(c, j));
  FROST_RETURN_IF_ERROR(validate(c));
  return c;
}

double tau_for_epoch(const PrototypeConfig& c, int64_t epoch) {
  if (c.epochs_b <= 1) return c.tau_start;
  double f = static_cast<double>(epoch - 1) / static_cast<double>(c.epochs_b - 1);
  return c.tau_start - f * (c.tau_start - c.tau_end);
}

}  // namespace frost::prototype
