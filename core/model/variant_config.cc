// Parsing and validation of config.json's "frost_variants" (core/model/variant_config.h).
#include "core/model/variant_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model/model_config.h"

namespace frost {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxRouterHidden = 4096;
constexpr int64_t kMaxCtxRank = int64_t{1} << 20;

// Errors name the field by its dotted path under frost_variants.
class Ctx {
 public:
  explicit Ctx(std::string label) : label_(std::move(label)) {}
  absl::Status error(const std::string& field, const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat(label_, ": ", VariantConfig::kKey, ".", field, " ", msg));
  }

  // An object whose keys are all in `known`.
  absl::Status object(const json& j, const std::string& field,
                      std::initializer_list<const char*> known) const {
    if (!j.is_object()) return error(field, absl::StrCat("must be an object, got ", j.dump()));
    for (const auto& [key, value] : j.items()) {
      bool ok = false;
      for (const char* k : known) ok = ok || key == k;
      if (!ok) {
        std::vector<std::string> names(known.begin(), known.end());
        return error(field.empty() ? key : field + "." + key,
                     absl::StrCat("is unknown (known: ", absl::StrJoin(names, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }
  absl::Status layers(const json& j, const std::string& field, std::vector<int64_t>* out) const {
    if (!j.is_array()) return error(field, absl::StrCat("must be a list of layer indices, got ", j.dump()));
    for (const json& e : j) {
      if (!e.is_number_integer()) {
        return error(field, absl::StrCat("must be a list of layer indices, got ", j.dump()));
      }
      out->push_back(e.get<int64_t>());
    }
    return absl::OkStatus();
  }
  absl::Status integer(const json& j, const std::string& field, int64_t* out) const {
    if (!j.is_number_integer()) return error(field, absl::StrCat("must be an integer, got ", j.dump()));
    *out = j.get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status number(const json& j, const std::string& field, double* out) const {
    if (!j.is_number()) return error(field, absl::StrCat("must be a number, got ", j.dump()));
    *out = j.get<double>();
    return absl::OkStatus();
  }
  absl::Status boolean(const json& j, const std::string& field, bool* out) const {
    if (!j.is_boolean()) return error(field, absl::StrCat("must be true or false, got ", j.dump()));
    *out = j.get<bool>();
    return absl::OkStatus();
  }

 private:
  std::string label_;
};

#define FROST_VAR_TRY(expr)                   \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (0)

}  // namespace

absl::Status parse_variant_config(const json& root, const std::string& label, int64_t n_layer,
                                  VariantConfig* out) {
  *out = VariantConfig();
  auto it = root.find(VariantConfig::kKey);
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  const Ctx c(label);
  const json& v = *it;
  if (!v.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": ", VariantConfig::kKey, " must be an object, got ", v.dump()));
  }
  FROST_VAR_TRY(c.object(v, "", {"ra_layers", "sba", "router", "mlp_ctx"}));
  if (v.contains("ra_layers")) FROST_VAR_TRY(c.layers(v["ra_layers"], "ra_layers", &out->ra_layers));
  if (v.contains("sba")) {
    const json& s = v["sba"];
    FROST_VAR_TRY(c.object(s, "sba", {"layers", "alpha"}));
    if (!s.contains("layers")) return c.error("sba.layers", "is missing");
    FROST_VAR_TRY(c.layers(s["layers"], "sba.layers", &out->sba_layers));
    if (!s.contains("alpha")) return c.error("sba.alpha", "is missing");
    FROST_VAR_TRY(c.number(s["alpha"], "sba.alpha", &out->sba_alpha));
    if (!std::isfinite(out->sba_alpha) || out->sba_alpha < 0 || out->sba_alpha > 1) {
      return c.error("sba.alpha", absl::StrCat("must be in [0, 1], got ", s["alpha"].dump()));
    }
  }
  if (v.contains("router")) {
    const json& r = v["router"];
    FROST_VAR_TRY(c.object(r, "router", {"layers", "ra_heads", "hidden"}));
    if (!r.contains("layers")) return c.error("router.layers", "is missing");
    FROST_VAR_TRY(c.layers(r["layers"], "router.layers", &out->router_layers));
    if (!r.contains("ra_heads")) return c.error("router.ra_heads", "is missing");
    FROST_VAR_TRY(c.integer(r["ra_heads"], "router.ra_heads", &out->router_ra_heads));
    if (r.contains("hidden")) FROST_VAR_TRY(c.integer(r["hidden"], "router.hidden", &out->router_hidden));
    if (out->router_hidden < 1 || out->router_hidden > kMaxRouterHidden) {
      return c.error("router.hidden",
                     absl::StrCat("must be in [1, ", kMaxRouterHidden, "], got ", out->router_hidden));
    }
  }
  if (v.contains("mlp_ctx")) {
    const json& m = v["mlp_ctx"];
    FROST_VAR_TRY(c.object(m, "mlp_ctx", {"rank", "layers", "conductor"}));
    if (!m.contains("rank")) return c.error("mlp_ctx.rank", "is missing");
    FROST_VAR_TRY(c.integer(m["rank"], "mlp_ctx.rank", &out->mlp_ctx_rank));
    if (out->mlp_ctx_rank < 1 || out->mlp_ctx_rank > kMaxCtxRank) {
      return c.error("mlp_ctx.rank",
                     absl::StrCat("must be in [1, ", kMaxCtxRank, "], got ", out->mlp_ctx_rank));
    }
    if (m.contains("layers")) {
      FROST_VAR_TRY(c.layers(m["layers"], "mlp_ctx.layers", &out->mlp_ctx_layers));
    } else {
      for (int64_t l = 0; l < n_layer; ++l) out->mlp_ctx_layers.push_back(l);
    }
    if (m.contains("conductor"))
      FROST_VAR_TRY(c.boolean(m["conductor"], "mlp_ctx.conductor", &out->mlp_ctx_conductor));
  }
  return absl::OkStatus();
}

absl::Status validate_variant_config(const ModelConfig& cfg, const std::string& label) {
  const VariantConfig& v = cfg.variants;
  auto err = [&](const std::string& field, const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(label, VariantConfig::kKey, ".", field, " ", msg));
  };
  auto check_layers = [&](const std::vector<int64_t>& ls, const std::string& field) -> absl::Status {
    std::set<int64_t> seen;
    for (int64_t l : ls) {
      if (l < 0 || l >= cfg.n_layer) {
        return err(field, absl::StrCat("has layer ", l, ", outside [0, ", cfg.n_layer, ")"));
      }
      if (!seen.insert(l).second) return err(field, absl::StrCat("lists layer ", l, " twice"));
    }
    return absl::OkStatus();
  };
  const bool gpt2 = cfg.arch == Arch::kGpt2;
  const char* heads = gpt2 ? "n_head" : "num_attention_heads";
  const char* kv_heads = gpt2 ? "n_head (kv)" : "num_key_value_heads";
  auto need_mha = [&](const std::vector<int64_t>& ls, const std::string& field) -> absl::Status {
    if (!ls.empty() && cfg.n_head != cfg.n_head_kv) {
      return err(field, absl::StrCat("needs ", kv_heads, " (", cfg.n_head_kv, ") == ", heads, " (",
                                     cfg.n_head, "): the cached q rows of those layers take the K slot"));
    }
    return absl::OkStatus();
  };
  FROST_VAR_TRY(check_layers(v.ra_layers, "ra_layers"));
  FROST_VAR_TRY(need_mha(v.ra_layers, "ra_layers"));
  FROST_VAR_TRY(check_layers(v.sba_layers, "sba.layers"));
  FROST_VAR_TRY(need_mha(v.sba_layers, "sba.layers"));
  for (int64_t l : v.sba_layers) {
    if (v.is_ra(l)) return err("sba.layers", absl::StrCat("has layer ", l, ", which ra_layers also lists"));
  }
  if (!std::isfinite(v.sba_alpha) || v.sba_alpha < 0 || v.sba_alpha > 1) {
    return err("sba.alpha", absl::StrCat("must be in [0, 1], got ", v.sba_alpha));
  }
  FROST_VAR_TRY(check_layers(v.router_layers, "router.layers"));
  if (!v.router_layers.empty()) {
    if (v.router_ra_heads < 1 || v.router_ra_heads >= cfg.n_head) {
      return err("router.ra_heads",
                 absl::StrCat("must be in [1, ", heads, " = ", cfg.n_head, "), got ", v.router_ra_heads));
    }
    if (v.router_hidden < 1 || v.router_hidden > kMaxRouterHidden) {
      return err("router.hidden",
                 absl::StrCat("must be in [1, ", kMaxRouterHidden, "], got ", v.router_hidden));
    }
  }
  FROST_VAR_TRY(check_layers(v.mlp_ctx_layers, "mlp_ctx.layers"));
  if (!v.mlp_ctx_layers.empty() || v.mlp_ctx_rank != 0) {
    if (!gpt2) {
      return err("mlp_ctx", absl::StrCat("is GPT-2 only (this is ",
                                         cfg.architecture.empty() ? "LLaMA" : cfg.architecture, ")"));
    }
    if (v.mlp_ctx_rank < 1 || v.mlp_ctx_rank > kMaxCtxRank) {
      return err("mlp_ctx.rank", absl::StrCat("must be in [1, ", kMaxCtxRank, "], got ", v.mlp_ctx_rank));
    }
  }
  return absl::OkStatus();
}

}  // namespace frost
