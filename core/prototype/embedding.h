#pragma once
// Embeddings from the frozen backbone: what POST /v1/embeddings and Generation.Embed serve.
//
// The embedding of one token sequence is the mean over its positions of backbone_hidden() (the final-norm
// hidden states, core/prototype/features.h), accumulated in double as FeatureCache::mean_pooled does for
// Predict's ridge baseline (the pooling frost already uses for Predict's features), then L2-normalized and
// returned as float. Mean pooling rather than the last token: the backbone is a causal LM never trained for
// retrieval, and the mean is the pooled feature frost's own heads are fitted on.
//
// Why here (the prototype layer, beside backbone_hidden): it is the same frozen-backbone feature Predict
// uses, computed by the same function on the same device (the served device's decoder when the model has a
// hidden_source, else the CPU reference forward); the server only validates and formats.
//
// Each input is computed alone (no padding, no batch): a result is the same whatever else is in the
// request, so embeddings are identical across batch sizes. Inputs are never truncated: one longer than
// the model's context is refused.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/model_loader.h"

namespace frost::prototype {

// Tokens of a text input, tokenized like Predict's features (tokenize_truncated): the tokenizer's BOS
// prepended when it has one, but never truncated. INVALID_ARGUMENT naming `what` ("input[2]") when the text
// has no tokens, when it is longer than the model's context (its token count and the limit), or when the
// tokenizer yields an id the embedding has no row for (check_token_ids' message); FAILED_PRECONDITION when
// the model has no tokenizer.
absl::StatusOr<std::vector<int32_t>> embedding_tokens(const LoadedModel& model, const std::string& text,
                                                      const std::string& what);

// Checks a token-id input, used exactly as given: non-empty, at most the model's context, every id in
// [0, n_vocab) (check_token_ids' message). INVALID_ARGUMENT naming `what`.
absl::Status check_embedding_ids(const LoadedModel& model, const std::vector<int32_t>& ids,
                                 const std::string& what);

// hidden [n, d] (any float dtype, n >= 1) → its mean over rows in double, L2-normalized, as float. A zero
// mean (never seen after a final norm) stays zero rather than dividing by zero; non-finite hidden states are
// INTERNAL (a JSON response could not carry them).
absl::StatusOr<std::vector<float>> pool_embedding(const at::Tensor& hidden);

// backbone_hidden(model, tokens), pooled (pool_embedding). `tokens` must have passed the checks above.
absl::StatusOr<std::vector<float>> embed_tokens(const LoadedModel& model, const std::vector<int32_t>& tokens);

}  // namespace frost::prototype
