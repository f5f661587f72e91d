// The LLaMA-shaped families by their config.json fields (core/model/model_families.h). Defaults are those of
// each family's transformers config class, so a config.json that leaves a field out means what it means to HF.
#include "core/model/model_families.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace frost {
namespace {

using hf_config::Fields;
using hf_config::json;

struct FamilyName {
  Family family;
  Arch arch;
  const char* architecture;
  const char* model_type;
};
constexpr FamilyName kFamilies[] = {
    {Family::kLlama, Arch::kLlama, "LlamaForCausalLM", "llama"},
    {Family::kMistral, Arch::kLlama, "MistralForCausalLM", "mistral"},
    {Family::kQwen2, Arch::kLlama, "Qwen2ForCausalLM", "qwen2"},
    {Family::kQwen3, Arch::kLlama, "Qwen3ForCausalLM", "qwen3"},
    {Family::kGemma2, Arch::kLlama, "Gemma2ForCausalLM", "gemma2"},
    {Family::kGemma3, Arch::kLlama, "Gemma3ForCausalLM", "gemma3_text"},
    {Family::kPhi3, Arch::kLlama, "Phi3ForCausalLM", "phi3"},
    {Family::kGpt2, Arch::kGpt2, "GPT2LMHeadModel", "gpt2"},
};

bool gemma(Family f) { return f == Family::kGemma2 || f == Family::kGemma3; }

// A number that HF lets an explicit null switch off: absent → `dflt`, null → 0 (off), else the value.
absl::Status nullable_double(const Fields& f, const char* field, double dflt, double* out) {
  *out = f.present(field) ? 0.0 : dflt;
  return f.opt_double(field, out);
}

absl::Status positive_finite(const Fields& f, const char* field, double v) {
  if (!std::isfinite(v) || v <= 0) return f.error(field, absl::StrCat("must be a positive number, got ", v));
  return absl::OkStatus();
}

// rope_scaling → c->rope_scaling (rotary_dim and max_pos already set).
absl::Status parse_rope_scaling(const Fields& top, ModelConfig* c) {
  const json* rs = top.get("rope_scaling");
  if (rs == nullptr) return absl::OkStatus();
  if (!rs->is_object()) return top.error("rope_scaling", absl::StrCat("must be an object or null, got ", rs->dump()));
  const Fields f(*rs, top.label() + ": rope_scaling");
  std::string type;
  const char* type_field = f.has("rope_type") ? "rope_type" : "type";
  FROST_CFG_TRY(f.opt_string(type_field, &type));
  RopeScaling& s = c->rope_scaling;
  if (type == "default" || type.empty()) {
    s.type = RopeType::kDefault;
  } else if (type == "linear") {
    s.type = RopeType::kLinear;
  } else if (type == "dynamic") {
    s.type = RopeType::kDynamic;
  } else if (type == "llama3") {
    s.type = RopeType::kLlama3;
  } else if (type == "yarn") {
    s.type = RopeType::kYarn;
  } else if (type == "longrope" || type == "su") {  // "su": longrope's first name (Phi-3-128k configs)
    s.type = RopeType::kLongRope;
  } else {
    return f.error(type_field, absl::StrCat("'", type, "' is unsupported (supported: default, linear, dynamic, llama3, "
                                                      "yarn, longrope)"));
  }
  if (f.has("mrope_section")) return f.error("mrope_section", "(multimodal RoPE) is unsupported");
  const bool needs_factor = s.type == RopeType::kLinear || s.type == RopeType::kDynamic ||
                            s.type == RopeType::kLlama3 || s.type == RopeType::kYarn;
  s.factor = 0;
  if (needs_factor && !f.has("factor")) return f.error("factor", "is missing");
  FROST_CFG_TRY(f.opt_double("factor", &s.factor));
  if (needs_factor && (!std::isfinite(s.factor) || s.factor < 1.0)) {
    return f.error("factor", absl::StrCat("must be a number >= 1, got ", s.factor));
  }
  if (s.type == RopeType::kDefault) s.factor = 1.0;
  if (s.type == RopeType::kLongRope && s.factor != 0) FROST_CFG_TRY(positive_finite(f, "factor", s.factor));
  // original_max_position_embeddings: in rope_scaling, or (Phi-3) beside it at the top level.
  s.original_max_pos = 0;
  FROST_CFG_TRY(top.opt_int("original_max_position_embeddings", &s.original_max_pos));
  FROST_CFG_TRY(f.opt_int("original_max_position_embeddings", &s.original_max_pos));
  if (s.type == RopeType::kLlama3) {
    if (!f.has("low_freq_factor")) return f.error("low_freq_factor", "is missing");
    if (!f.has("high_freq_factor")) return f.error("high_freq_factor", "is missing");
    if (!f.has("original_max_position_embeddings")) return f.error("original_max_position_embeddings", "is missing");
    FROST_CFG_TRY(f.opt_double("low_freq_factor", &s.low_freq_factor));
    FROST_CFG_TRY(f.opt_double("high_freq_factor", &s.high_freq_factor));
    FROST_CFG_TRY(positive_finite(f, "low_freq_factor", s.low_freq_factor));
    if (!std::isfinite(s.high_freq_factor) || s.high_freq_factor <= s.low_freq_factor) {
      return f.error("high_freq_factor", absl::StrCat("must be greater than low_freq_factor (", s.low_freq_factor,
                                                      "), got ", s.high_freq_factor));
    }
  }
  if (s.type == RopeType::kYarn) {
    if (s.original_max_pos == 0) s.original_max_pos = c->max_pos;
    FROST_CFG_TRY(f.opt_double("beta_fast", &s.beta_fast));
    FROST_CFG_TRY(f.opt_double("beta_slow", &s.beta_slow));
    FROST_CFG_TRY(f.opt_double("mscale", &s.mscale));
    FROST_CFG_TRY(f.opt_double("mscale_all_dim", &s.mscale_all_dim));
    FROST_CFG_TRY(f.opt_bool("truncate", &s.truncate));
    FROST_CFG_TRY(positive_finite(f, "beta_fast", s.beta_fast));
    FROST_CFG_TRY(positive_finite(f, "beta_slow", s.beta_slow));
  }
  if (s.type == RopeType::kYarn || s.type == RopeType::kLongRope) {
    FROST_CFG_TRY(f.opt_double("attention_factor", &s.attention_factor));
    if (s.attention_factor != 0) FROST_CFG_TRY(positive_finite(f, "attention_factor", s.attention_factor));
  }
  if (s.type == RopeType::kLongRope) {
    if (s.original_max_pos == 0) return f.error("original_max_position_embeddings", "is missing (longrope needs it)");
    const int64_t half = c->rot_dim() / 2;
    for (const char* name : {"short_factor", "long_factor"}) {
      const json* v = f.get(name);
      std::vector<double>& out = std::string(name) == "short_factor" ? s.short_factor : s.long_factor;
      if (v == nullptr) return f.error(name, "is missing");
      if (!v->is_array() || static_cast<int64_t>(v->size()) != half) {
        return f.error(name, absl::StrCat("must be a list of rotary_dim / 2 = ", half, " numbers, got ",
                                          v->is_array() ? absl::StrCat(v->size(), " entries") : v->dump()));
      }
      for (const json& x : *v) {
        if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() <= 0) {
          return f.error(name, absl::StrCat("must hold positive numbers, got ", x.dump()));
        }
        out.push_back(x.get<double>());
      }
    }
  }
  if (s.type == RopeType::kLlama3 || s.type == RopeType::kYarn || s.type == RopeType::kLongRope) {
    if (s.original_max_pos <= 0) {
      return f.error("original_max_position_embeddings", absl::StrCat("must be positive, got ", s.original_max_pos));
    }
  }
  return absl::OkStatus();
}

// Which layers slide, and over how many positions: layer_types when given, else each family's rule.
absl::Status parse_windows(const Fields& f, ModelConfig* c) {
  const Family fam = c->family;
  int64_t w = 0;
  if (fam == Family::kGemma2 || fam == Family::kGemma3) {
    w = f.present("sliding_window") ? 0 : 4096;  // Gemma{2,3}Config default; null: none
  }
  FROST_CFG_TRY(f.opt_int("sliding_window", &w));
  if (fam == Family::kLlama && w != 0) {
    return f.error("sliding_window", absl::StrCat("is unsupported for ", c->architecture, " (only null), got ", w));
  }
  if ((fam == Family::kQwen2 || fam == Family::kQwen3)) {
    bool use = false;
    FROST_CFG_TRY(f.opt_bool("use_sliding_window", &use));
    if (!use) w = 0;
  }
  if (w < 0) return f.error("sliding_window", absl::StrCat("must be positive or null, got ", w));
  const auto n = static_cast<size_t>(c->n_layer);
  std::vector<bool> sliding(n, false);
  if (const json* lt = f.get("layer_types")) {
    if (!lt->is_array() || lt->size() != n) {
      return f.error("layer_types", absl::StrCat("must list num_hidden_layers (", n, ") layer types, got ", lt->dump()));
    }
    for (size_t i = 0; i < n; ++i) {
      const json& t = (*lt)[i];
      if (t == "sliding_attention") {
        sliding[i] = true;
      } else if (t != "full_attention") {
        return f.error("layer_types", absl::StrCat("entry ", i, " ", t.dump(),
                                                   " is unsupported (supported: full_attention, sliding_attention)"));
      }
    }
  } else if (fam == Family::kGemma2) {
    for (size_t i = 0; i < n; ++i) sliding[i] = (i + 1) % 2 != 0;
  } else if (fam == Family::kGemma3) {
    int64_t pattern = 6;
    FROST_CFG_TRY(f.opt_int("sliding_window_pattern", &pattern));
    if (pattern <= 0) return f.error("sliding_window_pattern", absl::StrCat("must be positive, got ", pattern));
    for (size_t i = 0; i < n; ++i) sliding[i] = (static_cast<int64_t>(i) + 1) % pattern != 0;
  } else if (fam == Family::kQwen2 || fam == Family::kQwen3) {
    int64_t from = fam == Family::kQwen2 ? 28 : 28;  // max_window_layers default
    FROST_CFG_TRY(f.opt_int("max_window_layers", &from));
    for (size_t i = 0; i < n; ++i) sliding[i] = static_cast<int64_t>(i) >= from;
  } else {  // Mistral, Phi-3: every layer
    sliding.assign(n, true);
  }
  // A window as long as the context is no window (Phi-3.5's 262144 over 131072 positions).
  if (w == 0 || w >= c->max_pos) return absl::OkStatus();
  bool any = false;
  for (bool s : sliding) any = any || s;
  if (!any) return absl::OkStatus();
  c->window.assign(n, 0);
  for (size_t i = 0; i < n; ++i) c->window[i] = sliding[i] ? w : 0;
  return absl::OkStatus();
}

}  // namespace

std::string supported_architectures() {
  std::vector<std::string> names;
  for (const FamilyName& f : kFamilies) names.push_back(f.architecture);
  return absl::StrJoin(names, ", ");
}

absl::Status refuse_unsupported_layers(const Fields& f) {
  for (const char* field : {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"}) {
    int64_t n = 0;
    if (f.get(field) && f.opt_int(field, &n).ok() && n > 0) {
      return f.error(field, absl::StrCat(n, ": mixture-of-experts layers are unsupported (frost serves dense "
                                            "decoders)"));
    }
  }
  for (const char* field : {"vision_config", "text_config", "audio_config"}) {
    if (f.has(field)) {
      return f.error(field, "is present: multimodal models are unsupported (frost serves the text decoder of a "
                            "*ForCausalLM checkpoint)");
    }
  }
  for (const char* field : {"ssm_cfg", "state_size", "mamba_d_state", "ssm_state_size"}) {
    if (f.has(field)) {
      return f.error(field, absl::StrCat(f.get(field)->dump(), ": state-space (Mamba) layers are unsupported"));
    }
  }
  return absl::OkStatus();
}

absl::Status detect_family(const Fields& f, ModelConfig* c) {
  std::vector<std::string> archs;
  if (const json* a = f.get("architectures")) {
    if (!a->is_array()) return f.error("architectures", absl::StrCat("must be a list of strings, got ", a->dump()));
    for (const json& e : *a) {
      if (!e.is_string()) return f.error("architectures", absl::StrCat("must be a list of strings, got ", a->dump()));
      archs.push_back(e.get<std::string>());
    }
  }
  auto take = [c](const FamilyName& n) {
    c->family = n.family;
    c->arch = n.arch;
    c->architecture = n.architecture;
  };
  for (const std::string& a : archs)
    for (const FamilyName& n : kFamilies)
      if (a == n.architecture) {
        take(n);
        return absl::OkStatus();
      }
  const std::string supported = absl::StrCat("(supported: ", supported_architectures(), ")");
  if (!archs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(f.label(), ": unsupported architecture '",
                                                   absl::StrJoin(archs, "', '"), "' ", supported));
  }
  std::string model_type;
  FROST_CFG_TRY(f.opt_string("model_type", &model_type));
  if (model_type.empty()) return f.error("architectures", absl::StrCat("is missing (and so is model_type) ", supported));
  for (const FamilyName& n : kFamilies)
    if (model_type == n.model_type) {
      take(n);
      return absl::OkStatus();
    }
  return absl::InvalidArgumentError(
      absl::StrCat(f.label(), ": unsupported architecture (model_type '", model_type, "') ", supported));
}

absl::Status parse_llama_family(const Fields& f, ModelConfig* c) {
  const Family fam = c->family;
  c->arch = Arch::kLlama;
  FROST_CFG_TRY(f.req_int("vocab_size", &c->n_vocab));
  FROST_CFG_TRY(f.req_int("hidden_size", &c->dim));
  FROST_CFG_TRY(f.req_int("intermediate_size", &c->ffn_dim));
  FROST_CFG_TRY(f.req_int("num_hidden_layers", &c->n_layer));
  FROST_CFG_TRY(f.req_int("num_attention_heads", &c->n_head));
  FROST_CFG_TRY(f.req_int("max_position_embeddings", &c->max_pos));
  if (c->n_head <= 0) return f.error("num_attention_heads", absl::StrCat("must be positive, got ", c->n_head));
  c->n_head_kv = c->n_head;
  FROST_CFG_TRY(f.opt_int("num_key_value_heads", &c->n_head_kv));
  // head_dim: the config's; Qwen 3 and Gemma default to a fixed one, the others to hidden / heads.
  if (!f.has("head_dim") && (fam == Family::kQwen3 || gemma(fam))) c->head_dim = fam == Family::kQwen3 ? 128 : 256;
  if (f.has("head_dim")) {
    FROST_CFG_TRY(f.opt_int("head_dim", &c->head_dim));
  } else if (c->head_dim == 0) {
    if (c->dim > 0 && c->dim % c->n_head != 0) {  // dim <= 0 is reported by validation
      return f.error("num_attention_heads",
                     absl::StrCat("(", c->n_head, ") must divide hidden_size (", c->dim, ") when head_dim is absent"));
    }
    c->head_dim = c->dim / c->n_head;
  }
  c->norm_eps = fam == Family::kPhi3 ? 1e-5 : 1e-6;
  FROST_CFG_TRY(f.opt_double("rms_norm_eps", &c->norm_eps));
  c->rope_theta = fam == Family::kGemma3 ? 1e6 : 10000.0;
  FROST_CFG_TRY(f.opt_double("rope_theta", &c->rope_theta));
  c->tie_embeddings = gemma(fam);  // the config classes' defaults: Gemma ties, the others do not
  FROST_CFG_TRY(f.opt_bool("tie_word_embeddings", &c->tie_embeddings));
  // Biases: Llama, Qwen 3 and Gemma put attention_bias on q, k, v and o; Qwen 2 always biases q, k, v and
  // never o; Mistral and Phi-3 have none.
  c->attention_bias = fam == Family::kQwen2;
  if (fam == Family::kLlama || fam == Family::kQwen3 || gemma(fam)) {
    FROST_CFG_TRY(f.opt_bool("attention_bias", &c->attention_bias));
    c->o_bias = c->attention_bias;
  }
  c->mlp_bias = false;
  if (fam == Family::kLlama) FROST_CFG_TRY(f.opt_bool("mlp_bias", &c->mlp_bias));

  // The MLP's activation (gated: act(gate) · up): silu, or the tanh GELU of Gemma.
  const char* act_field = gemma(fam) && f.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  std::string act = gemma(fam) ? "gelu_pytorch_tanh" : "silu";
  FROST_CFG_TRY(f.opt_string(act_field, &act));
  if (act == "silu" || act == "swish") {
    c->act = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_new") {
    c->act = Activation::kGeluNew;
  } else {
    return f.error(act_field, absl::StrCat("'", act, "' is unsupported (supported: silu, gelu_pytorch_tanh, gelu_new)"));
  }

  // RoPE: partial rotary (Phi-4-mini), rope_scaling, Gemma 3's local base.
  double partial = 1.0;
  FROST_CFG_TRY(f.opt_double("partial_rotary_factor", &partial));
  if (!std::isfinite(partial) || partial <= 0 || partial > 1) {
    return f.error("partial_rotary_factor", absl::StrCat("must be in (0, 1], got ", partial));
  }
  // HF: int(head_dim × factor); 0 (all of head_dim) when the factor is 1 (validation checks head_dim itself).
  c->rotary_dim = partial == 1.0 ? 0 : static_cast<int64_t>(static_cast<double>(c->head_dim) * partial);
  if (partial != 1.0 && c->head_dim > 0 && (c->rotary_dim <= 0 || c->rotary_dim % 2 != 0)) {
    return f.error("partial_rotary_factor", absl::StrCat(partial, " × head_dim ", c->head_dim, " = ", c->rotary_dim,
                                                         " rotary dims: must be even and positive"));
  }
  FROST_CFG_TRY(parse_rope_scaling(f, c));
  if (fam == Family::kGemma3) {
    c->rope_local_theta = 10000.0;
    FROST_CFG_TRY(f.opt_double("rope_local_base_freq", &c->rope_local_theta));
    FROST_CFG_TRY(positive_finite(f, "rope_local_base_freq", c->rope_local_theta));
  }
  FROST_CFG_TRY(parse_windows(f, c));

  // Gemma: √hidden embedding scale, (1 + w) norms (folded into the weights at load), norms around both blocks,
  // query_pre_attn_scalar, Gemma 2's soft caps; Qwen 3 and Gemma 3: q / k norms.
  c->qk_norm = fam == Family::kQwen3 || fam == Family::kGemma3;
  if (gemma(fam)) {
    c->post_norms = true;
    c->embed_scale = std::sqrt(static_cast<double>(c->dim));
    double qpas = 256;
    FROST_CFG_TRY(f.opt_double("query_pre_attn_scalar", &qpas));
    FROST_CFG_TRY(positive_finite(f, "query_pre_attn_scalar", qpas));
    c->attn_scale = 1.0 / std::sqrt(qpas);
    const bool g2 = fam == Family::kGemma2;
    FROST_CFG_TRY(nullable_double(f, "attn_logit_softcapping", g2 ? 50.0 : 0.0, &c->attn_softcap));
    FROST_CFG_TRY(nullable_double(f, "final_logit_softcapping", g2 ? 30.0 : 0.0, &c->final_softcap));
    if (c->attn_softcap != 0) FROST_CFG_TRY(positive_finite(f, "attn_logit_softcapping", c->attn_softcap));
    if (c->final_softcap != 0) FROST_CFG_TRY(positive_finite(f, "final_logit_softcapping", c->final_softcap));
  } else {
    for (const char* field : {"attn_logit_softcapping", "final_logit_softcapping"})
      if (f.has(field)) return f.error(field, absl::StrCat("is unsupported for ", c->architecture, " (only null)"));
  }
  if (fam == Family::kLlama && f.has("no_rope_layers")) {
    return f.error("no_rope_layers", "(SmolLM3's NoPE layers) is unsupported");
  }
  return absl::OkStatus();
}

}  // namespace frost
