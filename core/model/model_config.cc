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

namespace frost {
namespace {

using json = nlohmann::json;

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

constexpr const char* kLlamaArch = "LlamaForCausalLM";
constexpr const char* kGpt2Arch = "GPT2LMHeadModel";

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

// Typed access to a config.json object. Errors are INVALID_ARGUMENT "<label>: <field> ...".
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

absl::Status parse_llama(const Fields& f, ModelConfig* c) {
  c->arch = Arch::kLlama;
  c->act = Activation::kSilu;
  FROST_CFG_TRY(f.req_int("vocab_size", &c->n_vocab));
  FROST_CFG_TRY(f.req_int("hidden_size", &c->dim));
  FROST_CFG_TRY(f.req_int("intermediate_size", &c->ffn_dim));
  FROST_CFG_TRY(f.req_int("num_hidden_layers", &c->n_layer));
  FROST_CFG_TRY(f.req_int("num_attention_heads", &c->n_head));
  FROST_CFG_TRY(f.req_int("max_position_embeddings", &c->max_pos));
  if (c->n_head <= 0) return f.error("num_attention_heads", absl::StrCat("must be positive, got ", c->n_head));
  c->n_head_kv = c->n_head;
  FROST_CFG_TRY(f.opt_int("num_key_value_heads", &c->n_head_kv));
  if (f.has("head_dim")) {
    FROST_CFG_TRY(f.opt_int("head_dim", &c->head_dim));
  } else {
    if (c->dim > 0 && c->dim % c->n_head != 0) {  // dim <= 0 is reported by validation
      return f.error("num_attention_heads",
                     absl::StrCat("(", c->n_head, ") must divide hidden_size (", c->dim, ") when head_dim is absent"));
    }
    c->head_dim = c->dim / c->n_head;
  }
  c->norm_eps = 1e-6;  // LlamaConfig default
  FROST_CFG_TRY(f.opt_double("rms_norm_eps", &c->norm_eps));
  c->rope_theta = 10000.0;
  FROST_CFG_TRY(f.opt_double("rope_theta", &c->rope_theta));
  c->tie_embeddings = false;  // LlamaConfig default
  FROST_CFG_TRY(f.opt_bool("tie_word_embeddings", &c->tie_embeddings));
  c->attention_bias = false;
  FROST_CFG_TRY(f.opt_bool("attention_bias", &c->attention_bias));
  c->mlp_bias = false;
  FROST_CFG_TRY(f.opt_bool("mlp_bias", &c->mlp_bias));

  std::string act = "silu";
  FROST_CFG_TRY(f.opt_string("hidden_act", &act));
  if (act != "silu") return f.error("hidden_act", absl::StrCat("'", act, "' is unsupported (supported: silu)"));
  if (f.has("rope_scaling")) {
    return f.error("rope_scaling", absl::StrCat("is unsupported (only null), got ", f.get("rope_scaling")->dump()));
  }
  // Features of LLaMA-derived configs that change the math.
  if (f.has("sliding_window")) {
    return f.error("sliding_window", absl::StrCat("is unsupported (only null), got ", f.get("sliding_window")->dump()));
  }
  if (f.has("partial_rotary_factor")) {
    double p = 1.0;
    FROST_CFG_TRY(f.opt_double("partial_rotary_factor", &p));
    if (p != 1.0) return f.error("partial_rotary_factor", absl::StrCat("is unsupported (only 1.0), got ", p));
  }
  return absl::OkStatus();
}

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

// Picks the architecture: a supported name in "architectures" wins; without "architectures"
// (or with an empty list) "model_type" decides.
absl::Status detect_arch(const Fields& f, Arch* arch, std::string* name) {
  std::vector<std::string> archs;
  if (const json* a = f.get("architectures")) {
    if (!a->is_array()) return f.error("architectures", absl::StrCat("must be a list of strings, got ", a->dump()));
    for (const json& e : *a) {
      if (!e.is_string()) return f.error("architectures", absl::StrCat("must be a list of strings, got ", a->dump()));
      archs.push_back(e.get<std::string>());
    }
  }
  for (const std::string& a : archs) {
    if (a == kLlamaArch || a == kGpt2Arch) {
      *arch = a == kLlamaArch ? Arch::kLlama : Arch::kGpt2;
      *name = a;
      return absl::OkStatus();
    }
  }
  const std::string supported = absl::StrCat("(supported: ", kLlamaArch, ", ", kGpt2Arch, ")");
  if (!archs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(f.label(), ": unsupported architecture '",
                                                   absl::StrJoin(archs, "', '"), "' ", supported));
  }
  std::string model_type;
  FROST_CFG_TRY(f.opt_string("model_type", &model_type));
  if (model_type == "llama") {
    *arch = Arch::kLlama;
    *name = kLlamaArch;
  } else if (model_type == "gpt2") {
    *arch = Arch::kGpt2;
    *name = kGpt2Arch;
  } else if (model_type.empty()) {
    return f.error("architectures", absl::StrCat("is missing (and so is model_type) ", supported));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(f.label(), ": unsupported architecture (model_type '", model_type, "') ", supported));
  }
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
    if (c.act != Activation::kSilu) return err("hidden_act", "must be silu for LLaMA");
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
  FROST_CFG_TRY(detect_arch(f, &c.arch, &c.architecture));
  FROST_CFG_TRY(c.arch == Arch::kGpt2 ? parse_gpt2(f, &c) : parse_llama(f, &c));
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
