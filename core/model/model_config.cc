// ModelConfig from a Hugging Face config.json. Every error names the file and the field.
#include "core/model/model_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/common/fs.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/json.h"
#include "core/model/hf_config_fields.h"
#include "core/model/model_families.h"

namespace frost {
namespace {

using json = nlohmann::json;
using hf_config::Fields;

// Limits that refuse absurd configs before anything is allocated from them.
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxDim = 65536;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxFfn = int64_t{1} << 20;
constexpr int64_t kMaxPos = int64_t{1} << 20;
constexpr uint64_t kMaxConfigBytes = 16u << 20;
constexpr int kMaxJsonDepth = 64;

// Hugging Face field names of each ModelConfig member, per architecture, so validation
// messages use the names the user sees in config.json.
struct FieldNames {
  const char* vocab;
  const char* dim;
  const char* n_layer;
  const char* n_head;
  const char* n_head_kv;
  const char* head_dim;
  const char* ffn;
  const char* max_pos;
  const char* eps;
};
constexpr FieldNames kLlamaNames{"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                 "num_key_value_heads", "head_dim", "intermediate_size",
                                 "max_position_embeddings", "rms_norm_eps"};
constexpr FieldNames kGpt2Names{"vocab_size", "n_embd", "n_layer", "n_head", "n_head (kv)",
                                "head_dim (n_embd / n_head)", "n_inner", "n_positions", "layer_norm_epsilon"};

const FieldNames& names_for(Arch a) { return a == Arch::kGpt2 ? kGpt2Names : kLlamaNames; }

absl::Status parse_gpt2(const Fields& f, ModelConfig* c) {
  c->arch = Arch::kGpt2;
  c->act = Activation::kGeluNew;
  FROST_CFG_TRY(f.req_int("vocab_size", &c->n_vocab));
  FROST_CFG_TRY(f.req_int("n_embd", &c->dim));
  FROST_CFG_TRY(f.req_int("n_layer", &c->n_layer));
  FROST_CFG_TRY(f.req_int("n_head", &c->n_head));
  FROST_CFG_TRY(f.req_int("n_positions", &c->max_pos));
  if (c->n_head <= 0) return f.error("n_head", absl::StrCat("must be positive, got ", c->n_head));
  if (c->dim > 0 && c->dim % c->n_head != 0) {  // dim <= 0 is reported by validation
    return f.error("n_head", absl::StrCat("(", c->n_head, ") must divide n_embd (", c->dim, ")"));
  }
  c->n_head_kv = c->n_head;
  c->head_dim = c->dim / c->n_head;
  // n_inner null → 4 * n_embd (an out-of-range n_embd, negative included, is reported by validation; no
  // overflow: a negative one used to be multiplied too; tests/fuzz/corpus/model_config/regress-*)
  c->ffn_dim = c->dim > 0 && c->dim <= kMaxDim ? 4 * c->dim : c->dim;
  FROST_CFG_TRY(f.opt_int("n_inner", &c->ffn_dim));
  c->norm_eps = 1e-5;
  FROST_CFG_TRY(f.opt_double("layer_norm_epsilon", &c->norm_eps));
  c->tie_embeddings = true;  // GPT2Config default
  FROST_CFG_TRY(f.opt_bool("tie_word_embeddings", &c->tie_embeddings));
  // GPT-2 has biases on every projection.
  c->attention_bias = true;
  c->mlp_bias = true;

  std::string act = "gelu_new";
  FROST_CFG_TRY(f.opt_string("activation_function", &act));
  // gelu_pytorch_tanh is the same tanh approximation as gelu_new.
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return f.error("activation_function",
                   absl::StrCat("'", act, "' is unsupported (supported: gelu_new, gelu_pytorch_tanh)"));
  }
  bool flag = true;
  FROST_CFG_TRY(f.opt_bool("scale_attn_weights", &flag));
  if (!flag) return f.error("scale_attn_weights", "false is unsupported");
  flag = false;
  FROST_CFG_TRY(f.opt_bool("scale_attn_by_inverse_layer_idx", &flag));
  if (flag) return f.error("scale_attn_by_inverse_layer_idx", "true is unsupported");
  flag = false;
  FROST_CFG_TRY(f.opt_bool("add_cross_attention", &flag));
  if (flag) return f.error("add_cross_attention", "true is unsupported");
  return absl::OkStatus();
}

// Parses JSON text with bounded nesting; errors are INVALID_ARGUMENT prefixed with `label`.
absl::Status parse_json(const std::string& text, const std::string& label, json* out) {
  if (std::optional<std::string> err = parse_json_bounded(text, kMaxJsonDepth, out))
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", *err));
  return absl::OkStatus();
}

absl::Status validate_with_label(const ModelConfig& c, const std::string& label) {
  const FieldNames& n = names_for(c.arch);
  auto err = [&](const char* field, const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(label, field, " ", msg));
  };
  auto range = [&](const char* field, int64_t v, int64_t max) -> absl::Status {
    if (v <= 0) return err(field, absl::StrCat("must be positive, got ", v));
    if (v > max) return err(field, absl::StrCat("must be at most ", max, ", got ", v));
    return absl::OkStatus();
  };
  FROST_CFG_TRY(range(n.vocab, c.n_vocab, kMaxVocab));
  FROST_CFG_TRY(range(n.dim, c.dim, kMaxDim));
  FROST_CFG_TRY(range(n.n_layer, c.n_layer, kMaxLayers));
  FROST_CFG_TRY(range(n.n_head, c.n_head, kMaxHeads));
  FROST_CFG_TRY(range(n.n_head_kv, c.n_head_kv, kMaxHeads));
  FROST_CFG_TRY(range(n.head_dim, c.head_dim, kMaxHeadDim));
  FROST_CFG_TRY(range(n.ffn, c.ffn_dim, kMaxFfn));
  FROST_CFG_TRY(range(n.max_pos, c.max_pos, kMaxPos));
  if (c.n_head % c.n_head_kv != 0) {
    return err(n.n_head_kv, absl::StrCat("(", c.n_head_kv, ") must divide ", n.n_head, " (", c.n_head, ")"));
  }
  if (c.q_dim() > 4 * kMaxDim) {
    return err(n.head_dim, absl::StrCat("times ", n.n_head, " (", c.head_dim, " * ", c.n_head, ") must be at most ",
                                        4 * kMaxDim));
  }
  if (c.arch == Arch::kGpt2) {
    if (c.n_head_kv != c.n_head) {
      return err("n_head", "GPT-2 has no grouped-query attention (kv heads must equal heads)");
    }
    if (c.head_dim * c.n_head != c.dim) {
      return err("n_head", absl::StrCat("(", c.n_head, ") must divide n_embd (", c.dim, ")"));
    }
    if (c.act != Activation::kGeluNew) return err("activation_function", "must be gelu_new for GPT-2");
  } else {
    if (c.head_dim % 2 != 0) return err(n.head_dim, absl::StrCat("must be even for RoPE, got ", c.head_dim));
    if (!std::isfinite(c.rope_theta) || c.rope_theta <= 0) {
      return err("rope_theta", absl::StrCat("must be a positive number, got ", c.rope_theta));
    }
    if (c.rot_dim() % 2 != 0 || c.rot_dim() > c.head_dim) {
      return err("partial_rotary_factor", absl::StrCat("gives ", c.rot_dim(), " rotary dims: must be even and at most ",
                                                       n.head_dim, " (", c.head_dim, ")"));
    }
    if (!c.window.empty() && static_cast<int64_t>(c.window.size()) != c.n_layer) {
      return err("sliding_window", absl::StrCat("has ", c.window.size(), " layer entries, expected ", c.n_layer));
    }
    for (int64_t w : c.window)
      if (w < 0) return err("sliding_window", absl::StrCat("must be positive, got ", w));
    for (double v : {c.embed_scale, c.attention_scale()})
      if (!std::isfinite(v) || v <= 0) return err("query_pre_attn_scalar", absl::StrCat("gives a bad scale ", v));
    if (!std::isfinite(c.attn_softcap) || c.attn_softcap < 0)
      return err("attn_logit_softcapping", absl::StrCat("must be positive or null, got ", c.attn_softcap));
    if (!std::isfinite(c.final_softcap) || c.final_softcap < 0)
      return err("final_logit_softcapping", absl::StrCat("must be positive or null, got ", c.final_softcap));
  }
  if (!std::isfinite(c.norm_eps) || c.norm_eps <= 0 || c.norm_eps >= 1) {
    return err(n.eps, absl::StrCat("must be in (0, 1), got ", c.norm_eps));
  }
  if (c.bos_id < -1 || c.bos_id >= c.n_vocab) {
    return err("bos_token_id", absl::StrCat("(", c.bos_id, ") must be in [0, ", n.vocab, " = ", c.n_vocab, ")"));
  }
  for (int32_t e : c.eos_ids) {
    if (e < 0 || e >= c.n_vocab) {
      return err("eos_token_id", absl::StrCat("(", e, ") must be in [0, ", n.vocab, " = ", c.n_vocab, ")"));
    }
  }
  return validate_variant_config(c, label);
}

absl::StatusOr<ModelConfig> parse_with_label(const std::string& text, const std::string& label) {
  json j;
  FROST_CFG_TRY(parse_json(text, label, &j));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": top level must be a JSON object, got ", j.type_name()));
  }
  const Fields f(j, label);
  ModelConfig c;
  FROST_CFG_TRY(refuse_unsupported_layers(f));
  FROST_CFG_TRY(detect_family(f, &c));
  FROST_CFG_TRY(c.arch == Arch::kGpt2 ? parse_gpt2(f, &c) : parse_llama_family(f, &c));
  FROST_CFG_TRY(f.opt_token_id("bos_token_id", &c.bos_id));
  FROST_CFG_TRY(f.opt_token_ids("eos_token_id", &c.eos_ids));
  // The sizes are checked before frost_variants is read: mlp_ctx.layers defaults to every layer, so an
  // absurd n_layer must be refused first, not enumerated (tests/fuzz/corpus/model_config/regress-*).
  FROST_CFG_TRY(validate_with_label(c, label + ": "));
  FROST_CFG_TRY(parse_variant_config(j, label, c.n_layer, &c.variants));
  FROST_CFG_TRY(validate_with_label(c, label + ": "));
  return c;
}

}  // namespace

bool parse_weight_dtype(const std::string& name, WeightDtype* out) {
  for (WeightDtype d : kWeightDtypes)
    if (name == weight_dtype_name(d)) {
      *out = d;
      return true;
    }
  return false;
}

namespace {
template <typename Keep>
std::string choices_of(Keep keep) {
  std::vector<WeightDtype> ds;
  for (WeightDtype d : kWeightDtypes)
    if (keep(d)) ds.push_back(d);
  std::string s;
  for (size_t i = 0; i < ds.size(); ++i)
    absl::StrAppend(&s, i == 0 ? "" : i + 1 == ds.size() ? " or " : ", ", weight_dtype_name(ds[i]));
  return s;
}
}  // namespace

std::string weight_dtype_choices() {
  return choices_of([](WeightDtype) { return true; });
}

std::string weight_dtype_choices(bool device) {
  return device ? choices_of(weight_dtype_on_device) : choices_of(weight_dtype_on_cpu);
}

bool weight_dtype_on_cpu(WeightDtype d) { return d != WeightDtype::kF16; }

bool weight_dtype_on_device(WeightDtype d) {
  return d == WeightDtype::kF32 || d == WeightDtype::kBF16 || d == WeightDtype::kF16 ||
         d == WeightDtype::kInt8;
}

absl::Status check_weight_dtype_on_cpu(WeightDtype d, const std::string& field) {
  if (weight_dtype_on_cpu(d)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " ", weight_dtype_name(d), ": ", weight_dtype_name(d),
                   " is a device weight format (model.device cuda or reference); the "
                   "CPU serves ",
                   weight_dtype_choices(false)));
}

const char* weight_dtype_name(WeightDtype d) {
  switch (d) {
    case WeightDtype::kBF16:
      return "bf16";
    case WeightDtype::kF16:
      return "fp16";
    case WeightDtype::kInt8:
      return "int8";
    case WeightDtype::kInt4:
      return "int4";
    case WeightDtype::kW8A8:
      return "w8a8";
    default:
      return "fp32";
  }
}

const char* family_name(Family f) {
  switch (f) {
    case Family::kLlama: return "llama";
    case Family::kMistral: return "mistral";
    case Family::kQwen2: return "qwen2";
    case Family::kQwen3: return "qwen3";
    case Family::kGemma2: return "gemma2";
    case Family::kGemma3: return "gemma3";
    case Family::kPhi3: return "phi3";
    case Family::kGpt2: return "gpt2";
  }
  return "?";
}

bool ModelConfig::any_window() const {
  for (int64_t w : window)
    if (w > 0) return true;
  return false;
}

bool ModelConfig::plain() const {
  if (arch == Arch::kGpt2) return true;
  const bool default_rope = rope_scaling.type == RopeType::kDefault || rope_scaling.type == RopeType::kDynamic;
  return default_rope && rot_dim() == head_dim && rope_local_theta == 0 && !any_window() && !qk_norm &&
         !post_norms && embed_scale == 1.0 && attn_scale == 0 && attn_softcap == 0 && final_softcap == 0 &&
         act == Activation::kSilu && o_bias == attention_bias;
}

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kGpt2: return "gpt2";
  }
  return "?";
}

absl::Status validate_model_config(const ModelConfig& cfg) { return validate_with_label(cfg, ""); }

absl::StatusOr<ModelConfig> parse_model_config(const std::string& json_text) {
  return parse_with_label(json_text, "config.json");
}

absl::StatusOr<ModelConfig> load_model_config(const std::string& model_dir) {
  struct stat st {};
  if (stat(model_dir.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(model_dir, ": no such model directory"));
  }
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(model_dir, ": not a directory"));
  const std::string path = model_dir + "/config.json";
  if (stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path, ": not found"));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  if (static_cast<uint64_t>(st.st_size) > kMaxConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", st.st_size, " bytes is larger than the limit of ", kMaxConfigBytes));
  }
  // read_file opens non-blocking and checks the kind first: a FIFO is refused, not waited on.
  absl::StatusOr<std::string> text = read_file(path, static_cast<int64_t>(kMaxConfigBytes));
  if (!text.ok()) return text.status();
  return parse_with_label(*text, path);
}

}  // namespace frost
