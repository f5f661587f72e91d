#include "core/generate/generator.h"

#include "absl/strings/str_cat.h"
#include "core/common/field_error.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/generate/sequence.h"

namespace frost {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kDeadline:
      return "deadline";
  }
  return "?";
}

Generator::Generator(const LoadedModel& model, GeneratorConfig cfg, const Clock* clock)
    : model_(model), cfg_(cfg), clock_(clock) {
  const int64_t max_pos = model_.config.max_pos;
  max_context_ = cfg_.max_context > 0 ? std::min(cfg_.max_context, max_pos) : max_pos;
}

absl::StatusOr<std::vector<int32_t>> Generator::prepare(const GenerationRequest& req) const {
  const int32_t n_vocab = static_cast<int32_t>(model_.config.n_vocab);
  FROST_RETURN_IF_ERROR(validate_sampling_params(req.params, n_vocab, cfg_.limits));
  std::vector<int32_t> ids;
  if (!req.prompt_ids.empty()) {
    for (size_t i = 0; i < req.prompt_ids.size(); ++i) {
      if (req.prompt_ids[i] < 0 || req.prompt_ids[i] >= n_vocab) {
        const std::string detail = absl::StrCat(req.prompt_ids[i], " is out of range [0, ", n_vocab, ")");
        return with_field(absl::InvalidArgumentError(absl::StrCat("prompt_ids[", i, "] = ", detail)),
                          {"prompt_ids", absl::StrCat("[", i, "]"), detail});
      }
    }
    ids = req.prompt_ids;
  } else {
    if (req.prompt.empty()) return invalid_field("prompt", "must not be empty");
    if (!model_.tokenizer) {
      return field_error(absl::StatusCode::kFailedPrecondition, "prompt",
                         "needs a tokenizer and the model has none: send prompt_ids instead of text");
    }
    FROST_ASSIGN_OR_RETURN(ids, model_.tokenizer->encode(req.prompt, req.add_bos));
    if (ids.empty()) return invalid_field("prompt", "encodes to zero tokens");
    // A tokenizer with more entries than the embedding has rows (Gemma 3) can encode text to an id the model
    // cannot embed.
    if (absl::Status st = check_token_ids(ids, n_vocab, "prompt (as tokenized)"); !st.ok())
      return with_field(st, {"prompt", "", std::string(st.message())});
  }
  if (cfg_.max_prompt_tokens > 0 && static_cast<int64_t>(ids.size()) > cfg_.max_prompt_tokens) {
    return invalid_field(
        "prompt",
        absl::StrCat("is ", ids.size(), " tokens, over limits.max_prompt_tokens = ", cfg_.max_prompt_tokens));
  }
  const int64_t need = static_cast<int64_t>(ids.size()) + req.params.max_new_tokens;
  if (need > max_context_) {
    const std::string msg =
        absl::StrCat("prompt tokens (", ids.size(), ") + max_new_tokens (", req.params.max_new_tokens,
                     ") = ", need, " exceeds the context length ", max_context_);
    return with_field(absl::InvalidArgumentError(msg), {"prompt", "", msg});
  }
  return ids;
}

absl::StatusOr<GenerationResult> Generator::generate(const GenerationRequest& req,
                                                     const TokenCallback& on_token,
                                                     const CancelToken& cancel) {
  FROST_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, prepare(req));
  const KvCodecKind codec = req.kv_codec.value_or(cfg_.kv_codec);
  if (codec == KvCodecKind::kKvSplice && !cfg_.kv_splice)
    return absl::FailedPreconditionError(
        "kv.codec: kvsplice but the generator has no KVSplice (GeneratorConfig::kv_splice)");
  if (!kv_ || kv_->spec().codec != codec) {
    FROST_RETURN_IF_ERROR(torch_call([&] {
      kv_ = std::make_unique<SequenceKv>(model_.model->kv_spec(
          max_context_, codec, codec == KvCodecKind::kKvSplice ? cfg_.kv_splice : nullptr));
    }));
  }
  if (req.constraint.kind != constrain::ConstraintSpec::Kind::kNone)
    return absl::UnimplementedError("constraint: structured output runs in the Engine (the serving path), not the "
                                    "reference Generator");
  Sequence seq(model_, std::move(prompt), req.params, clock_);
  for (;;) {
    FROST_ASSIGN_OR_RETURN(bool done, seq.step(*kv_, scratch_, cfg_.fast_decode, on_token, cancel));
    if (done) return seq.take_result();
  }
}

}  // namespace frost
