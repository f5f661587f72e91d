#include "core/generate/generator.h"

#include <c10/core/InferenceMode.h>

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"
#include "core/generate/detokenizer.h"
#include "core/generate/stop_condition.h"

namespace frost {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kDeadline: return "deadline";
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
        return absl::InvalidArgumentError(absl::StrCat("prompt_ids[", i, "] = ", req.prompt_ids[i],
                                                       " is out of range [0, ", n_vocab, ")"));
      }
    }
    ids = req.prompt_ids;
  } else {
    if (req.prompt.empty()) return absl::InvalidArgumentError("prompt must not be empty");
    if (!model_.tokenizer) {
      return absl::FailedPreconditionError("model has no tokenizer: send prompt_ids instead of text");
    }
    FROST_ASSIGN_OR_RETURN(ids, model_.tokenizer->encode(req.prompt, req.add_bos));
    if (ids.empty()) return absl::InvalidArgumentError("prompt encodes to zero tokens");
  }
  const int64_t need = static_cast<int64_t>(ids.size()) + req.params.max_new_tokens;
  if (need > max_context_) {
    return absl::InvalidArgumentError(absl::StrCat("prompt tokens (", ids.size(), ") + max_new_tokens (",
                                                   req.params.max_new_tokens, ") = ", need,
                                                   " exceeds the context length ", max_context_));
  }
  return ids;
}

absl::StatusOr<GenerationResult> Generator::generate(const GenerationRequest& req, const TokenCallback& on_token,
                                                     const CancelToken& cancel) {
  const int64_t t_start = clock_->now_ns();
  FROST_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, prepare(req));
  c10::InferenceMode inference_mode;
  const Transformer& model = *model_.model;
  const int32_t n_vocab = static_cast<int32_t>(model_.config.n_vocab);

  if (!kv_) {
    FROST_RETURN_IF_ERROR(torch_call([&] {
      kv_ = std::make_unique<SequenceKv>(model.kv_spec(max_context_, cfg_.kv_codec));
      scratch_ = model.make_scratch(max_context_);
    }));
  }
  kv_->reset();

  GenerationResult res;
  res.prompt_ids = prompt;
  res.n_prompt = static_cast<int32_t>(prompt.size());
  Sampler sampler(req.params, n_vocab);
  sampler.add_prompt(prompt);
  std::optional<IncrementalDetokenizer> detok;
  if (model_.tokenizer) detok.emplace(*model_.tokenizer);
  StopChecker stop(req.params, model_.config.eos_ids);
  std::vector<float> logits(static_cast<size_t>(n_vocab));

  auto stopped_by_cancel = [&]() -> bool {
    switch (cancel.state()) {
      case CancelToken::State::kRunning: return false;
      case CancelToken::State::kCancelled: res.finish_reason = FinishReason::kCancelled; return true;
      case CancelToken::State::kDeadlineExceeded: res.finish_reason = FinishReason::kDeadline; return true;
    }
    return false;
  };
  auto emit = [&](TokenEvent&& ev) {
    res.text += ev.text;
    if (on_token) on_token(ev);
  };

  // Prefill: the whole prompt through the reference path (batched mat-mat), last logits only.
  if (stopped_by_cancel()) return res;
  const int64_t t_prefill0 = clock_->now_ns();
  FROST_RETURN_IF_ERROR(torch_call([&] {
    at::Tensor ids = at::empty({static_cast<int64_t>(prompt.size())}, at::kLong);
    for (size_t i = 0; i < prompt.size(); ++i) ids.data_ptr<int64_t>()[i] = prompt[i];
    at::Tensor out = model.forward(ids, *kv_, /*last_only=*/true).contiguous();
    std::memcpy(logits.data(), out.data_ptr<float>(), logits.size() * sizeof(float));
  }));
  const int64_t t_decode0 = clock_->now_ns();
  res.t_prefill_s = static_cast<double>(t_decode0 - t_prefill0) * 1e-9;

  res.finish_reason = FinishReason::kLength;
  for (int32_t i = 0; i < req.params.max_new_tokens; ++i) {
    const SampledToken tok = sampler.sample(logits.data());
    if (i == 0) res.t_first_token_s = static_cast<double>(clock_->now_ns() - t_start) * 1e-9;
    if (stop.is_stop_token(tok.id)) {
      res.finish_reason = FinishReason::kStop;
      res.stop_reason = absl::StrCat("token:", tok.id);
      break;
    }
    res.ids.push_back(tok.id);
    TokenEvent ev;
    ev.id = tok.id;
    ev.index = i;
    ev.logprob = tok.logprob;
    ev.top_logprobs = tok.top;
    const StopResult sr = stop.on_text(detok ? detok->push(tok.id) : std::string());
    ev.text = sr.emit;
    emit(std::move(ev));
    if (sr.stopped) {
      res.finish_reason = FinishReason::kStop;
      res.stop_reason = sr.matched;
      break;
    }
    if (i + 1 == req.params.max_new_tokens) break;  // length: no forward for a token never sampled
    if (stopped_by_cancel()) break;
    // Decode step: the fast fused path, or the reference path when configured.
    FROST_RETURN_IF_ERROR(torch_call([&] {
      if (cfg_.fast_decode) {
        const float* out = model.decode_step(tok.id, *kv_, scratch_);
        std::memcpy(logits.data(), out, logits.size() * sizeof(float));
      } else {
        at::Tensor ids = at::full({1}, static_cast<int64_t>(tok.id), at::kLong);
        at::Tensor out = model.forward(ids, *kv_, /*last_only=*/true).contiguous();
        std::memcpy(logits.data(), out.data_ptr<float>(), logits.size() * sizeof(float));
      }
    }));
    ++res.n_decode_steps;
  }
  // Release whatever is still held back (incomplete UTF-8 at the end, stop-string prefix
  // that never completed). After a stop-string match the remainder is dropped.
  if (!stop.stopped()) {
    const StopResult sr = stop.on_text(detok ? detok->flush() : std::string());
    std::string tail = sr.emit;
    if (sr.stopped) {
      res.finish_reason = FinishReason::kStop;
      res.stop_reason = sr.matched;
    } else {
      tail += stop.flush();
    }
    if (!tail.empty()) {
      TokenEvent ev;
      ev.id = -1;
      ev.index = static_cast<int32_t>(res.ids.size());
      ev.text = std::move(tail);
      emit(std::move(ev));
    }
  }
  res.n_completion = static_cast<int32_t>(res.ids.size());
  res.t_decode_s = static_cast<double>(clock_->now_ns() - t_decode0) * 1e-9;
  return res;
}

}  // namespace frost
