#include "server/embed_exec.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/prototype/embedding.h"
#include "server/generation_codec.h"

namespace frost::server {

namespace {

std::string name_of(const std::string& field, size_t i) { return absl::StrCat(field, "[", i, "]"); }

absl::Status check_total(int64_t total, const std::string& field) {
  if (total > kMaxEmbedTokens)
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", total, " tokens in all, more than the cap of ", kMaxEmbedTokens, " tokens per request"));
  return absl::OkStatus();
}

}  // namespace

absl::Status check_embed_inputs(const LoadedModel& model, const EmbedInputs& in,
                                const LimitsSection& limits) {
  const bool texts = !in.texts.empty(), ids = !in.ids.empty();
  if (texts == ids)
    return absl::InvalidArgumentError(absl::StrCat(in.texts_field, " / ", in.ids_field,
                                                   ": exactly one must be non-empty",
                                                   texts ? " (both are set)" : ""));
  const std::string& field = texts ? in.texts_field : in.ids_field;
  const size_t n = texts ? in.texts.size() : in.ids.size();
  if (n > static_cast<size_t>(kMaxEmbedInputs))
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", n, " inputs, more than the cap of ", kMaxEmbedInputs, " per request"));
  if (texts) {
    for (size_t i = 0; i < in.texts.size(); ++i)
      FROST_RETURN_IF_ERROR(check_prompt_text(name_of(field, i), in.texts[i], limits));
    return absl::OkStatus();
  }
  int64_t total = 0;
  for (size_t i = 0; i < in.ids.size(); ++i) {
    FROST_RETURN_IF_ERROR(prototype::check_embedding_ids(model, in.ids[i], name_of(field, i)));
    total += static_cast<int64_t>(in.ids[i].size());
  }
  return check_total(total, field);
}

absl::StatusOr<EmbedOutput> run_embed(const LoadedModel& model, const EmbedInputs& in,
                                      const std::function<bool()>& cancelled) {
  std::vector<std::vector<int32_t>> tokenized;
  const std::vector<std::vector<int32_t>>* tokens = &in.ids;
  if (!in.texts.empty()) {
    tokenized.reserve(in.texts.size());
    int64_t total = 0;
    for (size_t i = 0; i < in.texts.size(); ++i) {
      FROST_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                             prototype::embedding_tokens(model, in.texts[i], name_of(in.texts_field, i)));
      total += static_cast<int64_t>(ids.size());
      FROST_RETURN_IF_ERROR(check_total(total, in.texts_field));  // before tokenizing the rest
      tokenized.push_back(std::move(ids));
    }
    tokens = &tokenized;
  }
  EmbedOutput out;
  out.vectors.reserve(tokens->size());
  for (const std::vector<int32_t>& t : *tokens) {
    if (cancelled && cancelled()) return absl::CancelledError("embeddings: the client went away");
    FROST_ASSIGN_OR_RETURN(std::vector<float> v, prototype::embed_tokens(model, t));
    out.vectors.push_back(std::move(v));
    out.n_tokens.push_back(static_cast<int32_t>(t.size()));
    out.prompt_tokens += static_cast<int64_t>(t.size());
  }
  return out;
}

}  // namespace frost::server
