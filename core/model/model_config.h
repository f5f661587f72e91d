#pragma once
// ModelConfig: the architecture hyper-parameters read from a Hugging Face config.json.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/rope_scaling.h"
#include "core/model/variant_config.h"

namespace frost {

// The layer shape: kLlama is every RMSNorm + RoPE decoder (Llama, Mistral, Qwen 2/2.5/3, Gemma 2/3, Phi-3/4);
// kGpt2 LayerNorm + learned positions. Family names the checkpoint's weight layout and config conventions.
enum class Arch { kLlama, kGpt2 };
enum class Family { kLlama, kMistral, kQwen2, kQwen3, kGemma2, kGemma3, kPhi3, kGpt2 };
// kGeluNew is the tanh approximation (gelu_new, gelu_pytorch_tanh). LLaMA-shaped MLPs are gated: act(gate) · up.
enum class Activation { kSilu, kGeluNew };
// How the weight matrices are stored and read (core/model/quantize.h for int8 / int4). fp16 is a device
// format: the device decoders (model.device cuda / reference) read it, the CPU path does not
// (weight_dtype_on_cpu).
enum class WeightDtype { kF32, kBF16, kInt8, kInt4, kW8A8, kF16 };

const char* arch_name(Arch a);                   // "llama" | "gpt2"
const char* family_name(Family f);               // "llama" | "mistral" | "qwen2" | "qwen3" | "gemma2" | ...
const char* weight_dtype_name(WeightDtype d);    // "fp32" | "bf16" | "fp16" | "int8" | "int4" | "w8a8"
bool parse_weight_dtype(const std::string& name, WeightDtype* out);  // false for another name
// Every weight format, in the order the CLIs and the config list them (one list: a format added here is
// accepted everywhere).
inline constexpr WeightDtype kWeightDtypes[] = {WeightDtype::kF32,  WeightDtype::kBF16, WeightDtype::kF16,
                                                WeightDtype::kInt8, WeightDtype::kInt4, WeightDtype::kW8A8};
std::string weight_dtype_choices();  // "fp32, bf16, fp16, int8, int4 or w8a8", for usage errors
// Where a format runs: the CPU path (CpuExecutor, Generator, the CLIs without a device) every format but
// fp16; a device decoder (core/exec/device_decoder.h) fp32, bf16, fp16 and int8.
bool weight_dtype_on_cpu(WeightDtype d);
bool weight_dtype_on_device(WeightDtype d);
// The formats of one side, "fp32, bf16, int8, int4 or w8a8" (cpu) / "fp32, bf16, fp16 or int8" (device), in
// kWeightDtypes order.
std::string weight_dtype_choices(bool device);
// OK when the CPU path runs `d`; else INVALID_ARGUMENT "<field> fp16: fp16 is a device weight format
// (model.device cuda or reference); the CPU serves ..." (field: "model.dtype", "--dtype").
absl::Status check_weight_dtype_on_cpu(WeightDtype d, const std::string& field);

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string architecture;  // as in config.json, e.g. "LlamaForCausalLM"
  int64_t n_vocab = 0;
  int64_t dim = 0;        // hidden_size / n_embd
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // == n_head for GPT-2
  int64_t head_dim = 0;   // dim / n_head unless config.json says otherwise (LLaMA)
  int64_t ffn_dim = 0;    // intermediate_size / n_inner (GPT-2 default 4*dim)
  int64_t max_pos = 0;    // max_position_embeddings / n_positions
  double rope_theta = 10000.0;  // LLaMA only
  double norm_eps = 1e-5;       // rms_norm_eps / layer_norm_epsilon
  bool tie_embeddings = true;
  bool attention_bias = false;  // LLaMA: q/k/v biases (Qwen2: always); GPT-2 always has biases
  bool o_bias = false;          // the output projection's bias (Llama's attention_bias; not Qwen2's)
  bool mlp_bias = false;        // LLaMA: gate/up/down biases
  Activation act = Activation::kSilu;
  Family family = Family::kLlama;

  // ---- the families' features (core/model/model_families.cc reads them; every backend runs them or refuses
  // the model at start, core/model/layer_sequence.h) ----
  RopeScaling rope_scaling;      // rope_scaling (global layers)
  int64_t rotary_dim = 0;        // head_dim × partial_rotary_factor (0 before parsing → head_dim)
  double rope_local_theta = 0;   // Gemma 3's rope_local_base_freq for sliding layers (0: none, all global)
  std::vector<int64_t> window;   // per layer: 0 full causal attention; W > 0 the last W positions (sliding)
  bool qk_norm = false;          // Qwen 3, Gemma 3: RMSNorm over each q / k head before RoPE
  bool post_norms = false;       // Gemma 2/3: the attention and MLP outputs are normed before the residual add
  double embed_scale = 1.0;      // Gemma: embeddings × sqrt(hidden_size)
  double attn_scale = 0;         // query_pre_attn_scalar^-½ (Gemma); 0 → head_dim^-½
  double attn_softcap = 0;       // Gemma 2: scores = cap · tanh(scores / cap); 0 = none
  double final_softcap = 0;      // Gemma 2: logits = cap · tanh(logits / cap); 0 = none
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;  // eos_token_id may be a list in config.json
  VariantConfig variants;        // "frost_variants" (core/model/variant_config.h); empty = plain model

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  int64_t rot_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  double attention_scale() const { return attn_scale > 0 ? attn_scale : 1.0 / std::sqrt(static_cast<double>(head_dim)); }
  // Layer l's sliding window (0: full causal attention).
  int64_t window_of(int64_t l) const {
    return window.empty() ? 0 : window[static_cast<size_t>(l)];
  }
  bool any_window() const;
  // Whether layer l rotates with the local table (Gemma 3's sliding layers).
  bool local_rope(int64_t l) const { return rope_local_theta > 0 && window_of(l) > 0; }
  // Whether the model needs anything beyond the plain LLaMA / GPT-2 layer (default RoPE over all of head_dim,
  // full attention, no extra norms, scales or caps) — what a backend without the families' ops refuses.
  bool plain() const;
};

// Parses config.json text. Errors are INVALID_ARGUMENT naming the field, e.g.
// "config.json: num_key_value_heads (3) must divide num_attention_heads (8)". Unknown
// architectures → INVALID_ARGUMENT "unsupported architecture ...". Unused keys are ignored
// (HF configs carry many); unsupported features that change the math (rope_scaling, sliding
// window, ...) are rejected.
absl::StatusOr<ModelConfig> parse_model_config(const std::string& json_text);

// Reads and parses <dir>/config.json (NOT_FOUND when absent).
absl::StatusOr<ModelConfig> load_model_config(const std::string& model_dir);

// Checks internal consistency (positive sizes, divisibility, limits). Used by the parser and
// by builtin models.
absl::Status validate_model_config(const ModelConfig& cfg);

}  // namespace frost
