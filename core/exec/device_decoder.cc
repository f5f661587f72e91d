#include "core/exec/device_decoder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/model/layer_sequence.h"
#include "core/model/rope.h"

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

absl::Status device_supports(const ModelConfig& c, WeightDtype dtype, const std::string& device,
                             const LayerFeatures& have) {
  auto refuse = [&](auto&&... parts) {
    return absl::FailedPreconditionError(
        absl::StrCat("model.device ", device, ": the device decoder cannot run this model: ", parts...));
  };
  // The device backends implement the layer sequence's plain ops (and the families' ops where `have` says
  // so), none of the variant ops.
  if (absl::Status st = check_layer_features(c, have, absl::StrCat("model.device ", device),
                                             "runs only on model.device cpu");
      !st.ok())
    return st;
  if (!weight_dtype_on_device(dtype))
    return refuse("model.dtype ", weight_dtype_name(dtype), " (a device serves ", weight_dtype_choices(true),
                  " weights)");
  const bool llama = c.arch == Arch::kLlama;
  // LLaMA-shaped: SwiGLU, or (a families' feature) the tanh-GELU gate; GPT-2: gelu_new.
  if (llama ? c.act != Activation::kSilu && !(have.families && c.act == Activation::kGeluNew)
            : c.act != Activation::kGeluNew)
    return refuse("an activation other than ", llama ? "SiLU (SwiGLU)" : "gelu_new", " in a ", arch_name(c.arch),
                  " model");
  if (c.head_dim % 8 != 0 || c.head_dim > 128) return refuse("head_dim ", c.head_dim, " (a multiple of 8 up to 128)");
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) return refuse(c.n_head, " query heads over ", c.n_head_kv);
  const int64_t g = c.n_head / c.n_head_kv;
  if (g != 1 && g != 2 && g != 4 && g != 8)
    return refuse(c.n_head, " query heads over ", c.n_head_kv, " kv heads (1, 2, 4 or 8 per kv head)");
  if (c.max_pos > cuda::kAttnSplits * cuda::kAttnMaxSplit)
    return refuse("max_position_embeddings ", c.max_pos, " (up to ", cuda::kAttnSplits * cuda::kAttnMaxSplit,
                  ")");
  return absl::OkStatus();
}

void device_rope_table(const ModelConfig& c, bool local, std::vector<float>* cos_t,
                       std::vector<float>* sin_t) {
  const RopeTable t =
      make_rope_table(local ? c.rope_local_theta : c.rope_theta, local ? RopeScaling{} : c.rope_scaling,
                      c.rot_dim(), c.max_pos, c.max_pos);
  const at::Tensor cs = t.cos.contiguous(), sn = t.sin.contiguous();
  cos_t->assign(cs.data_ptr<float>(), cs.data_ptr<float>() + cs.numel());
  sin_t->assign(sn.data_ptr<float>(), sn.data_ptr<float>() + sn.numel());
}

namespace {
[[noreturn]] void refuse_step(const char* who, const std::string& m) {
  throw DeviceError(absl::StrCat(who, ": ", m), false);
}
}  // namespace

void check_device_allocation(const ModelConfig& cfg, cuda::KvFormat format, const cuda::KvLayout& layout,
                             const DeviceLimits& limits, const DeviceLimits& before, const char* who) {
  if (before.allocated()) refuse_step(who, "allocate() called twice");
  if (layout.format != format || layout.n_layer != cfg.n_layer || layout.n_head_kv != cfg.n_head_kv ||
      layout.head_dim != cfg.head_dim || layout.block_tokens < 1)
    refuse_step(who, "the KV layout does not match the model and options");
  if (limits.n_blocks < 1 || limits.max_rows < 1 || limits.max_seqs < 1 || limits.max_blocks < 1)
    refuse_step(who, "sizes must be positive");
}

void check_device_blocks(const DeviceLimits& lim, int seq, const int32_t* blocks, int n, const char* who) {
  if (seq < 0 || seq >= lim.max_seqs)
    refuse_step(who, absl::StrCat("sequence slot ", seq, " out of [0, ", lim.max_seqs, ")"));
  if (n > lim.max_blocks)
    refuse_step(who, absl::StrCat(n, " blocks exceed the ", lim.max_blocks, " a sequence can hold"));
  for (int i = 0; i < n; ++i)
    if (blocks[i] < 0 || blocks[i] >= lim.n_blocks)
      refuse_step(who, absl::StrCat("block ", blocks[i], " out of the pool's ", lim.n_blocks));
}

void check_device_step(const ModelConfig& cfg, const DeviceLimits& lim, int block_tokens, int max_logit_rows,
                       const DeviceStep& step, const char* who) {
  if (!lim.allocated()) refuse_step(who, "no KV pool: allocate() first");
  const auto n = static_cast<int>(step.token.size());
  if (n <= 0 || n > lim.max_rows)
    refuse_step(who, absl::StrCat("a step has 1..", lim.max_rows, " rows, got ", n));
  if (step.seq.size() != step.token.size() || step.pos.size() != step.token.size())
    refuse_step(who, "token, seq and pos must have one entry per row");
  const auto nl = static_cast<int>(step.logit_rows.size());
  const int max_nl = std::min(n, max_logit_rows);
  if (nl <= 0 || nl > max_nl) refuse_step(who, absl::StrCat("1..", max_nl, " logit rows, got ", nl));
  for (int r = 0; r < n; ++r) {
    if (step.token[r] < 0 || step.token[r] >= cfg.n_vocab)
      refuse_step(who, absl::StrCat("token ", step.token[r], " out of range"));
    if (step.seq[r] < 0 || step.seq[r] >= lim.max_seqs)
      refuse_step(who, absl::StrCat("sequence slot ", step.seq[r], " out of range"));
    if (step.pos[r] < 0 || step.pos[r] >= cfg.max_pos || step.pos[r] / block_tokens >= lim.max_blocks)
      refuse_step(who, absl::StrCat("position ", step.pos[r], " out of range"));
  }
  for (int32_t lr : step.logit_rows)
    if (lr < 0 || lr >= n) refuse_step(who, absl::StrCat("logit row ", lr, " out of range"));
}

}  // namespace frost
