#include "core/exec/device_decoder.h"

#include "absl/strings/str_cat.h"

namespace frost {

cuda::DType device_weight_dtype(WeightDtype dtype) {
  return dtype == WeightDtype::kBF16   ? cuda::DType::kBF16
         : dtype == WeightDtype::kF16  ? cuda::DType::kF16
         : dtype == WeightDtype::kInt8 ? cuda::DType::kInt8
                                       : cuda::DType::kF32;
}

absl::Status device_int8_weights_present(const ModelWeights& w, const std::string& device) {
  if (w.dtype != WeightDtype::kInt8) return absl::OkStatus();
  auto check = [&](const kernels::QuantizedMatrix& q, const char* what, size_t layer) {
    if (q.defined() && q.bits == 8 && q.group > 0) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat("model.device ", device, ": model.dtype int8 but ",
                                                      what, " of layer ", layer, " has no int8 form"));
  };
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    for (auto [q, what] : {std::pair{&L.wqkv_q, "wqkv"}, std::pair{&L.wo_q, "wo"},
                           std::pair{&L.w_in_q, "w_in"}, std::pair{&L.w_out_q, "w_out"}})
      if (absl::Status st = check(*q, what, l); !st.ok()) return st;
  }
  if (!w.lm_head_q.defined() || w.lm_head_q.bits != 8)
    return absl::FailedPreconditionError(
        absl::StrCat("model.device ", device, ": model.dtype int8 but the LM head has no int8 form"));
  return absl::OkStatus();
}

absl::Status device_supports(const ModelConfig& c, WeightDtype dtype, const std::string& device) {
  auto refuse = [&](auto&&... parts) {
    return absl::FailedPreconditionError(
        absl::StrCat("model.device ", device, ": the device decoder cannot run this model: ", parts...));
  };
  if (c.variants.any())
    return refuse("architecture variants (RA / SBA / router / MLP context) run only on model.device cpu");
  if (!weight_dtype_on_device(dtype))
    return refuse("model.dtype ", weight_dtype_name(dtype), " (a device serves ", weight_dtype_choices(true),
                  " weights)");
  const bool llama = c.arch == Arch::kLlama;
  if (llama ? c.act != Activation::kSilu : c.act != Activation::kGeluNew)
    return refuse("an activation other than ", llama ? "SiLU (SwiGLU)" : "gelu_new", " in a ", arch_name(c.arch),
                  " model");
  if (c.head_dim % 8 != 0 || c.head_dim > 128) return refuse("head_dim ", c.head_dim, " (a multiple of 8 up to 128)");
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) return refuse(c.n_head, " query heads over ", c.n_head_kv);
  const int64_t g = c.n_head / c.n_head_kv;
  if (g != 1 && g != 2 && g != 4 && g != 8)
    return refuse(c.n_head, " query heads over ", c.n_head_kv, " kv heads (1, 2, 4 or 8 per kv head)");
  if (c.max_pos > cuda::kAttnSplits * cuda::kAttnMaxSplit)
    return refuse("max_position_embeddings ", c.max_pos, " (up to ", cuda::kAttnSplits * cuda::kAttnMaxSplit, ")");
  return absl::OkStatus();
}

}  // namespace frost
