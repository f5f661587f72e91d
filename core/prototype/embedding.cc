#include "core/prototype/embedding.h"

#include <c10/core/InferenceMode.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/prototype/features.h"

namespace frost::prototype {

namespace {

absl::Status check_length(const LoadedModel& model, size_t n, const std::string& what) {
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": empty input (no tokens)"));
  const int64_t limit = model.config.max_pos;
  if (static_cast<int64_t>(n) > limit)
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", n,
                                                   " tokens, more than the model's context of ", limit,
                                                   " tokens (inputs are not truncated)"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> embedding_tokens(const LoadedModel& model, const std::string& text,
                                                      const std::string& what) {
  if (!model.tokenizer)
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the served model has no tokenizer; give token ids instead of text"));
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty text"));
  absl::StatusOr<std::vector<int32_t>> ids = model.tokenizer->encode(text, /*add_bos=*/true);
  if (!ids.ok()) return absl::Status(ids.status().code(), absl::StrCat(what, ": ", ids.status().message()));
  FROST_RETURN_IF_ERROR(check_length(model, ids->size(), what));
  FROST_RETURN_IF_ERROR(check_token_ids(*ids, model.config.n_vocab, absl::StrCat(what, " (as tokenized)")));
  return ids;
}

absl::Status check_embedding_ids(const LoadedModel& model, const std::vector<int32_t>& ids,
                                 const std::string& what) {
  FROST_RETURN_IF_ERROR(check_length(model, ids.size(), what));
  return check_token_ids(ids, model.config.n_vocab, what);
}

absl::StatusOr<std::vector<float>> pool_embedding(const at::Tensor& hidden) {
  return torch_call([&] {
    TORCH_CHECK(hidden.dim() == 2 && hidden.size(0) >= 1,
                "pool_embedding: expected [n >= 1, d] hidden states");
    at::Tensor mean = hidden.detach().cpu().to(at::kDouble).mean(0);  // as FeatureCache::mean_pooled
    const double norm = mean.norm().item<double>();
    TORCH_CHECK(std::isfinite(norm), "the backbone produced non-finite hidden states");
    if (norm > 0) mean = mean / norm;
    at::Tensor f = mean.to(at::kFloat).contiguous();
    const float* p = f.data_ptr<float>();
    return std::vector<float>(p, p + f.numel());
  });
}

absl::StatusOr<std::vector<float>> embed_tokens(const LoadedModel& model,
                                                const std::vector<int32_t>& tokens) {
  c10::InferenceMode inference_mode;
  FROST_ASSIGN_OR_RETURN(at::Tensor h, backbone_hidden(model, tokens));
  return pool_embedding(h);
}

}  // namespace frost::prototype
