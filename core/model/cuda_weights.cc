#include "core/model/cuda_weights.h"

#include "absl/strings/str_cat.h"

namespace frost {

absl::StatusOr<CudaHostModel> cuda_host_model(const ModelConfig& c, const ModelWeights& w) {
  auto refuse = [](auto&&... parts) {
    return absl::FailedPreconditionError(absl::StrCat("the CUDA decoder cannot run this model: ", parts...));
  };
  if (c.variants.any()) return refuse("architecture variants (RA / SBA / router / MLP context) are CPU-only");
  if (w.dtype != WeightDtype::kF32 && w.dtype != WeightDtype::kBF16)
    return refuse("weights ", weight_dtype_name(w.dtype), " (it serves fp32 or bf16)");
  const bool llama = c.arch == Arch::kLlama;
  if (llama ? c.act != Activation::kSilu : c.act != Activation::kGeluNew)
    return refuse("an activation other than ", llama ? "SiLU (SwiGLU)" : "gelu_new", " in a ",
                  arch_name(c.arch), " model");
  if (c.head_dim % 8 != 0 || c.head_dim > 128)
    return refuse("head_dim ", c.head_dim, " (a multiple of 8 up to 128)");
  const int64_t g = c.n_head / c.n_head_kv;
  if (c.n_head % c.n_head_kv != 0 || (g != 1 && g != 2 && g != 4 && g != 8))
    return refuse(c.n_head, " query heads over ", c.n_head_kv, " kv heads (1, 2, 4 or 8 per kv head)");
  if (c.max_pos > cuda::kAttnSplits * cuda::kAttnMaxSplit)
    return refuse("max_position_embeddings ", c.max_pos, " (up to ", cuda::kAttnSplits * cuda::kAttnMaxSplit,
                  ")");

  CudaHostModel m;
  cuda::ModelSpec& s = m.spec;
  s.arch = llama ? cuda::Arch::kLlama : cuda::Arch::kGpt2;
  s.n_vocab = static_cast<int>(c.n_vocab);
  s.dim = static_cast<int>(c.dim);
  s.n_layer = static_cast<int>(c.n_layer);
  s.n_head = static_cast<int>(c.n_head);
  s.n_head_kv = static_cast<int>(c.n_head_kv);
  s.head_dim = static_cast<int>(c.head_dim);
  s.ffn_dim = static_cast<int>(c.ffn_dim);
  s.max_pos = static_cast<int>(c.max_pos);
  s.norm_eps = static_cast<float>(c.norm_eps);
  s.rope_theta = c.rope_theta;
  s.tie_embeddings = w.lm_head.is_same(w.tok_embed);
  auto f32 = [&m](const at::Tensor& t) -> const float* {
    if (!t.defined()) return nullptr;
    m.keep.push_back(t.to(at::kFloat).contiguous());
    return m.keep.back().data_ptr<float>();
  };
  cuda::HostWeights& h = m.weights;
  h.tok_embed = f32(w.tok_embed);
  h.pos_embed = f32(w.pos_embed);
  for (const LayerWeights& l : w.layers) {
    cuda::HostLayer L;
    L.attn_norm_w = f32(l.attn_norm_w);
    L.attn_norm_b = f32(l.attn_norm_b);
    L.wqkv = f32(l.wqkv);
    L.bqkv = f32(l.bqkv);
    L.wo = f32(l.wo);
    L.bo = f32(l.bo);
    L.mlp_norm_w = f32(l.mlp_norm_w);
    L.mlp_norm_b = f32(l.mlp_norm_b);
    L.w_in = f32(l.w_in);
    L.b_in = f32(l.b_in);
    L.w_out = f32(l.w_out);
    L.b_out = f32(l.b_out);
    h.layers.push_back(L);
  }
  h.final_norm_w = f32(w.final_norm_w);
  h.final_norm_b = f32(w.final_norm_b);
  h.lm_head = s.tie_embeddings ? nullptr : f32(w.lm_head);
  return m;
}

}  // namespace frost
