#include "core/model/quantize.h"

#include "absl/strings/str_cat.h"
#include "core/common/torch_status.h"

namespace frost {

absl::Status quantize_weights(ModelWeights& w, WeightDtype dtype, int64_t int8_group) {
  if (dtype != WeightDtype::kInt8 && dtype != WeightDtype::kInt4 && dtype != WeightDtype::kW8A8)
    return absl::OkStatus();
  if (dtype == WeightDtype::kW8A8 && int8_group > 0 && int8_group % 4 != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("quantize_weights: w8a8 needs an int8 group that is a multiple of 4 (or 0), got ", int8_group));
  if (w.tok_embed.scalar_type() != at::kFloat)
    return absl::InvalidArgumentError("quantize_weights: the weights must be loaded as fp32 first");
  return torch_call([&] {
    // int4 models keep the MLP output projection and the LM head at int8 (quantize.h says why).
    auto quantize = [&](at::Tensor& m, kernels::QuantizedMatrix& q, bool int8_in_int4_models) {
      if (!m.defined()) return;
      q = dtype != WeightDtype::kInt4 || int8_in_int4_models ? kernels::quantize_int8(m, int8_group)
                                                             : kernels::quantize_int4(m, kInt4Group);
      m = kernels::dequantize(q);
    };
    for (LayerWeights& l : w.layers) {
      quantize(l.wqkv, l.wqkv_q, false);
      quantize(l.wo, l.wo_q, false);
      quantize(l.w_in, l.w_in_q, false);
      quantize(l.w_out, l.w_out_q, true);
    }
    // A tied head stops aliasing the embeddings: the head is read quantized, the embeddings stay as loaded.
    at::Tensor head = w.lm_head;
    quantize(head, w.lm_head_q, true);
    w.lm_head = head;
    w.dtype = dtype;
  });
}

}  // namespace frost
