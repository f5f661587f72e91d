#include "core/model/weight_map.h"

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"

namespace frost {
namespace {

std::string shape_str(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

struct Source {
  const SafetensorsFile* file;
  const StTensorInfo* info;
};

// Name → tensor lookup across files that records which names were used.
class TensorTable {
 public:
  absl::Status add(const SafetensorsFile* f) {
    files_.push_back(base(f));
    for (const auto& info : f->tensors()) {
      auto [it, inserted] = by_name_.emplace(info.name, Source{f, &info});
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", info.name, "' appears in both ",
                                                       base(it->second.file), " and ", base(f)));
      }
    }
    return absl::OkStatus();
  }

  bool has(const std::string& name) const { return by_name_.count(name) > 0; }

  // Fetches `name` with the expected shape, converted to `dtype`, as an owned contiguous tensor.
  absl::StatusOr<at::Tensor> get(const std::string& name, const std::vector<int64_t>& shape,
                                 at::ScalarType dtype) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing tensor '", name, "' (not in ", absl::StrJoin(files_, ", "), ")"));
    }
    used_.insert(name);
    const Source& src = it->second;
    if (src.info->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(base(src.file), ": tensor '", name, "' has shape ",
                                                     shape_str(src.info->shape), ", expected ", shape_str(shape)));
    }
    // One pass: a conversion (bf16 stored, fp32 served) already makes a fresh tensor; only a same-dtype view of
    // the mapped file needs the copy (1B-class load: one copy of 2.5 GB less).
    return torch_call([&] {
      const at::Tensor view = src.file->view(*src.info);
      at::Tensor t = view.to(dtype).contiguous();
      return t.data_ptr() == view.data_ptr() ? t.clone() : t;
    });
  }

  // A learned scalar stored with shape [] or [1], as an fp32 tensor of shape [].
  absl::StatusOr<at::Tensor> get_scalar(const std::string& name) {
    auto it = by_name_.find(name);
    const bool one = it != by_name_.end() && it->second.info->shape == std::vector<int64_t>{1};
    FROST_ASSIGN_OR_RETURN(at::Tensor t,
                           get(name, one ? std::vector<int64_t>{1} : std::vector<int64_t>{}, at::kFloat));
    return t.reshape({});
  }

  void ignore(const std::string& name) { used_.insert(name); }

  absl::Status check_all_used() const {
    for (const auto& [name, src] : by_name_) {
      if (!used_.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(base(src.file), ": unexpected tensor '", name,
                                                       "' (not a parameter of this architecture)"));
      }
    }
    return absl::OkStatus();
  }

  const std::map<std::string, Source>& all() const { return by_name_; }

 private:
  static std::string base(const SafetensorsFile* f) { return std::filesystem::path(f->path()).filename().string(); }
  std::map<std::string, Source> by_name_;
  std::set<std::string> used_;
  std::vector<std::string> files_;  // file names, for messages
};

// The architecture-variant tensors of layer i (core/model/variants.h, docs/architecture_variants.md), in
// torch.nn.Linear layout [out, in] for both families. `attn` / `mlp` are the layer's attention and MLP
// name prefixes ("h.3.attn.", "model.layers.3.self_attn."). Learned scalars must lie in [0, 1].
absl::Status map_variant_layer(const ModelConfig& c, TensorTable& t, int64_t i, const std::string& attn,
                               const std::string& mlp, at::ScalarType wd, VariantLayerWeights* w) {
  const VariantConfig& v = c.variants;
  const int64_t C = c.dim, D = c.head_dim;
  if (v.is_router(i)) {
    const int64_t hid = v.router_hidden, nr = v.router_ra_heads, nf = c.n_head - nr;
    FROST_ASSIGN_OR_RETURN(w->router_w1, t.get(attn + "router.fc1.weight", {hid, 4}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(w->router_b1, t.get(attn + "router.fc1.bias", {hid}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(w->router_w2, t.get(attn + "router.fc2.weight", {2, hid}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(w->router_b2, t.get(attn + "router.fc2.bias", {2}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(w->proj_full, t.get(attn + "proj_full.weight", {C, nf * D}, wd));
    FROST_ASSIGN_OR_RETURN(w->proj_full_b, t.get(attn + "proj_full.bias", {C}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(w->proj_ra, t.get(attn + "proj_ra.weight", {C, nr * D}, wd));
    FROST_ASSIGN_OR_RETURN(w->proj_ra_b, t.get(attn + "proj_ra.bias", {C}, at::kFloat));
  }
  if (v.has_mlp_ctx(i)) {
    const int64_t R = v.mlp_ctx_rank;
    FROST_ASSIGN_OR_RETURN(w->ctx_down, t.get(mlp + "ctx_down.weight", {R, C}, wd));
    FROST_ASSIGN_OR_RETURN(w->ctx_up, t.get(mlp + "ctx_up.weight", {c.ffn_dim, R}, wd));
    auto unit = [&](const std::string& name, at::Tensor* out) -> absl::Status {
      FROST_ASSIGN_OR_RETURN(*out, t.get_scalar(name));
      const float x = out->item<float>();
      if (!(x >= 0.f && x <= 1.f)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' must be in [0, 1], got ", x));
      }
      return absl::OkStatus();
    };
    FROST_RETURN_IF_ERROR(unit(mlp + "ctx_alpha", &w->ctx_alpha));
    if (v.mlp_ctx_conductor) FROST_RETURN_IF_ERROR(unit(mlp + "route_gate", &w->route_gate));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelWeights> map_llama(const ModelConfig& c, TensorTable& t, at::ScalarType wd) {
  const int64_t C = c.dim, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim, V = c.n_vocab, D = c.head_dim;
  const bool gemma = c.family == Family::kGemma2 || c.family == Family::kGemma3;
  const bool phi3 = c.family == Family::kPhi3;
  // Gemma's RMSNorm multiplies by (1 + w): folded into the fp32 weight here (the same fp32 sum HF computes).
  auto norm = [&](const std::string& name, int64_t n) -> absl::StatusOr<at::Tensor> {
    FROST_ASSIGN_OR_RETURN(at::Tensor w, t.get(name, {n}, at::kFloat));
    return gemma ? (w + 1.0f).contiguous() : w;
  };
  ModelWeights w;
  FROST_ASSIGN_OR_RETURN(w.tok_embed, t.get("model.embed_tokens.weight", {V, C}, wd));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerWeights lw;
    FROST_ASSIGN_OR_RETURN(lw.attn_norm_w, norm(p + "input_layernorm.weight", C));
    if (phi3) {  // fused rows q | k | v
      FROST_ASSIGN_OR_RETURN(lw.wqkv, t.get(p + "self_attn.qkv_proj.weight", {Q + 2 * KV, C}, wd));
    } else {
      FROST_ASSIGN_OR_RETURN(at::Tensor wq, t.get(p + "self_attn.q_proj.weight", {Q, C}, wd));
      FROST_ASSIGN_OR_RETURN(at::Tensor wk, t.get(p + "self_attn.k_proj.weight", {KV, C}, wd));
      FROST_ASSIGN_OR_RETURN(at::Tensor wv, t.get(p + "self_attn.v_proj.weight", {KV, C}, wd));
      lw.wqkv = at::cat({wq, wk, wv}, 0).contiguous();
    }
    if (!c.variants.is_router(i)) {  // router layers: proj_full / proj_ra instead
      FROST_ASSIGN_OR_RETURN(lw.wo, t.get(p + "self_attn.o_proj.weight", {C, Q}, wd));
    }
    if (c.attention_bias) {
      FROST_ASSIGN_OR_RETURN(at::Tensor bq, t.get(p + "self_attn.q_proj.bias", {Q}, at::kFloat));
      FROST_ASSIGN_OR_RETURN(at::Tensor bk, t.get(p + "self_attn.k_proj.bias", {KV}, at::kFloat));
      FROST_ASSIGN_OR_RETURN(at::Tensor bv, t.get(p + "self_attn.v_proj.bias", {KV}, at::kFloat));
      lw.bqkv = at::cat({bq, bk, bv}, 0).contiguous();
    }
    if (c.o_bias && !c.variants.is_router(i)) {
      FROST_ASSIGN_OR_RETURN(lw.bo, t.get(p + "self_attn.o_proj.bias", {C}, at::kFloat));
    }
    if (c.qk_norm) {
      FROST_ASSIGN_OR_RETURN(lw.q_norm_w, norm(p + "self_attn.q_norm.weight", D));
      FROST_ASSIGN_OR_RETURN(lw.k_norm_w, norm(p + "self_attn.k_norm.weight", D));
    }
    if (c.post_norms) {  // Gemma: post_attention_layernorm norms the attention output; the MLP has its own two
      FROST_ASSIGN_OR_RETURN(lw.post_attn_norm_w, norm(p + "post_attention_layernorm.weight", C));
      FROST_ASSIGN_OR_RETURN(lw.mlp_norm_w, norm(p + "pre_feedforward_layernorm.weight", C));
      FROST_ASSIGN_OR_RETURN(lw.post_mlp_norm_w, norm(p + "post_feedforward_layernorm.weight", C));
    } else {
      FROST_ASSIGN_OR_RETURN(lw.mlp_norm_w, norm(p + "post_attention_layernorm.weight", C));
    }
    if (phi3) {  // fused rows gate | up
      FROST_ASSIGN_OR_RETURN(lw.w_in, t.get(p + "mlp.gate_up_proj.weight", {2 * F, C}, wd));
    } else {
      FROST_ASSIGN_OR_RETURN(at::Tensor wg, t.get(p + "mlp.gate_proj.weight", {F, C}, wd));
      FROST_ASSIGN_OR_RETURN(at::Tensor wu, t.get(p + "mlp.up_proj.weight", {F, C}, wd));
      lw.w_in = at::cat({wg, wu}, 0).contiguous();
    }
    FROST_ASSIGN_OR_RETURN(lw.w_out, t.get(p + "mlp.down_proj.weight", {C, F}, wd));
    if (c.mlp_bias) {
      FROST_ASSIGN_OR_RETURN(at::Tensor bg, t.get(p + "mlp.gate_proj.bias", {F}, at::kFloat));
      FROST_ASSIGN_OR_RETURN(at::Tensor bu, t.get(p + "mlp.up_proj.bias", {F}, at::kFloat));
      FROST_ASSIGN_OR_RETURN(lw.b_out, t.get(p + "mlp.down_proj.bias", {C}, at::kFloat));
      lw.b_in = at::cat({bg, bu}, 0).contiguous();
    }
    t.ignore(p + "self_attn.rotary_emb.inv_freq");  // buffer in older checkpoints
    FROST_RETURN_IF_ERROR(map_variant_layer(c, t, i, p + "self_attn.", p + "mlp.", wd, &lw.var));
    w.layers.push_back(std::move(lw));
  }
  FROST_ASSIGN_OR_RETURN(w.final_norm_w, norm("model.norm.weight", C));
  if (c.tie_embeddings) {
    w.lm_head = w.tok_embed;
    if (t.has("lm_head.weight")) {  // some tied checkpoints still carry a copy
      FROST_ASSIGN_OR_RETURN(at::Tensor ignored, t.get("lm_head.weight", {V, C}, wd));
      (void)ignored;
    }
  } else {
    FROST_ASSIGN_OR_RETURN(w.lm_head, t.get("lm_head.weight", {V, C}, wd));
  }
  return w;
}

absl::StatusOr<ModelWeights> map_gpt2(const ModelConfig& c, TensorTable& t, at::ScalarType wd) {
  const int64_t C = c.dim, F = c.ffn_dim, V = c.n_vocab, P = c.max_pos;
  // GPT2LMHeadModel.save_pretrained writes "transformer."-prefixed names; the original
  // GPT-2 files have none. Accept either, not a mix.
  const std::string pre = t.has("transformer.wte.weight") ? "transformer." : "";
  ModelWeights w;
  FROST_ASSIGN_OR_RETURN(w.tok_embed, t.get(pre + "wte.weight", {V, C}, wd));
  FROST_ASSIGN_OR_RETURN(w.pos_embed, t.get(pre + "wpe.weight", {P, C}, at::kFloat));
  // Conv1D stores [in, out]; transpose to [out, in].
  auto conv = [&](const std::string& n, int64_t in, int64_t out) -> absl::StatusOr<at::Tensor> {
    FROST_ASSIGN_OR_RETURN(at::Tensor m, t.get(n, {in, out}, wd));
    return m.t().contiguous();
  };
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = absl::StrCat(pre, "h.", i, ".");
    LayerWeights lw;
    FROST_ASSIGN_OR_RETURN(lw.attn_norm_w, t.get(p + "ln_1.weight", {C}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(lw.attn_norm_b, t.get(p + "ln_1.bias", {C}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(lw.wqkv, conv(p + "attn.c_attn.weight", C, 3 * C));
    FROST_ASSIGN_OR_RETURN(lw.bqkv, t.get(p + "attn.c_attn.bias", {3 * C}, at::kFloat));
    if (!c.variants.is_router(i)) {  // router layers: proj_full / proj_ra instead
      FROST_ASSIGN_OR_RETURN(lw.wo, conv(p + "attn.c_proj.weight", C, C));
      FROST_ASSIGN_OR_RETURN(lw.bo, t.get(p + "attn.c_proj.bias", {C}, at::kFloat));
    }
    FROST_ASSIGN_OR_RETURN(lw.mlp_norm_w, t.get(p + "ln_2.weight", {C}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(lw.mlp_norm_b, t.get(p + "ln_2.bias", {C}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(lw.w_in, conv(p + "mlp.c_fc.weight", C, F));
    FROST_ASSIGN_OR_RETURN(lw.b_in, t.get(p + "mlp.c_fc.bias", {F}, at::kFloat));
    FROST_ASSIGN_OR_RETURN(lw.w_out, conv(p + "mlp.c_proj.weight", F, C));
    FROST_ASSIGN_OR_RETURN(lw.b_out, t.get(p + "mlp.c_proj.bias", {C}, at::kFloat));
    t.ignore(p + "attn.bias");         // causal-mask buffer of old checkpoints
    t.ignore(p + "attn.masked_bias");  // idem
    FROST_RETURN_IF_ERROR(map_variant_layer(c, t, i, p + "attn.", p + "mlp.", wd, &lw.var));
    w.layers.push_back(std::move(lw));
  }
  FROST_ASSIGN_OR_RETURN(w.final_norm_w, t.get(pre + "ln_f.weight", {C}, at::kFloat));
  FROST_ASSIGN_OR_RETURN(w.final_norm_b, t.get(pre + "ln_f.bias", {C}, at::kFloat));
  if (c.tie_embeddings) {
    w.lm_head = w.tok_embed;
    if (t.has("lm_head.weight")) {
      FROST_ASSIGN_OR_RETURN(at::Tensor ignored, t.get("lm_head.weight", {V, C}, wd));
      (void)ignored;
    }
  } else {
    FROST_ASSIGN_OR_RETURN(w.lm_head, t.get("lm_head.weight", {V, C}, wd));
  }
  return w;
}

}  // namespace

absl::StatusOr<ModelWeights> map_weights(const ModelConfig& cfg, const std::vector<const SafetensorsFile*>& files,
                                         at::ScalarType wdtype) {
  if (wdtype != at::kFloat && wdtype != at::kBFloat16 && wdtype != at::kHalf) {
    return absl::InvalidArgumentError("weights dtype must be fp32, bf16 or fp16");
  }
  TensorTable table;
  for (const SafetensorsFile* f : files) FROST_RETURN_IF_ERROR(table.add(f));
  absl::StatusOr<ModelWeights> w = cfg.arch == Arch::kLlama ? map_llama(cfg, table, wdtype)
                                                            : map_gpt2(cfg, table, wdtype);
  if (!w.ok()) return w.status();
  FROST_RETURN_IF_ERROR(table.check_all_used());
  return w;
}

}  // namespace frost
