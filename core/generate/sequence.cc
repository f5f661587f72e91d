#include "core/generate/sequence.h"

#include <c10/core/InferenceMode.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"

namespace frost {

Sequence::Sequence(const LoadedModel& model, std::vector<int32_t> prompt, const SamplingParams& params,
                   SequenceKv& kv, DecodeScratch& scratch, bool fast_decode, const Clock* clock)
    : model_(model),
      params_(params),
      kv_(kv),
      scratch_(scratch),
      fast_decode_(fast_decode),
      clock_(clock),
      sampler_(params, static_cast<int32_t>(model.config.n_vocab)),
      stop_(params, model.config.eos_ids),
      logits_(static_cast<size_t>(model.config.n_vocab)) {
  t_start_ns_ = clock_->now_ns();
  kv_.reset();
  sampler_.add_prompt(prompt);
  if (model_.tokenizer) detok_.emplace(*model_.tokenizer);
  res_.prompt_ids = std::move(prompt);
  res_.n_prompt = static_cast<int32_t>(res_.prompt_ids.size());
  res_.finish_reason = FinishReason::kLength;
}

void Sequence::emit(TokenEvent&& ev, const TokenCallback& on_token) {
  res_.text += ev.text;
  if (on_token) on_token(ev);
}

void Sequence::finish(FinishReason reason, const TokenCallback& on_token) {
  res_.finish_reason = reason;
  // Release whatever is still held back (incomplete UTF-8 at the end, a stop-string prefix
  // that never completed). After a stop-string match the remainder is dropped.
  if (!stop_.stopped()) {
    const StopResult sr = stop_.on_text(detok_ ? detok_->flush() : std::string());
    std::string tail = sr.emit;
    if (sr.stopped) {
      res_.finish_reason = FinishReason::kStop;
      res_.stop_reason = sr.matched;
    } else {
      tail += stop_.flush();
    }
    if (!tail.empty()) {
      TokenEvent ev;
      ev.id = -1;
      ev.index = static_cast<int32_t>(res_.ids.size());
      ev.text = std::move(tail);
      emit(std::move(ev), on_token);
    }
  }
  res_.n_completion = static_cast<int32_t>(res_.ids.size());
  if (prefilled_) res_.t_decode_s = static_cast<double>(clock_->now_ns() - t_decode0_ns_) * 1e-9;
  done_ = true;
}

bool Sequence::check_cancel(const CancelToken& cancel, const TokenCallback& on_token) {
  switch (cancel.state()) {
    case CancelToken::State::kRunning: return false;
    case CancelToken::State::kCancelled: finish(FinishReason::kCancelled, on_token); return true;
    case CancelToken::State::kDeadlineExceeded: finish(FinishReason::kDeadline, on_token); return true;
  }
  return false;
}

absl::StatusOr<bool> Sequence::step(const TokenCallback& on_token, const CancelToken& cancel) {
  if (done_) return true;
  if (check_cancel(cancel, on_token)) return true;
  c10::InferenceMode inference_mode;
  const Transformer& model = *model_.model;

  // 1. one forward pass: the prompt (reference path, batched GEMMs), or the last sampled token
  if (!prefilled_) {
    const int64_t t0 = clock_->now_ns();
    FROST_RETURN_IF_ERROR(torch_call([&] {
      at::Tensor ids = at::empty({static_cast<int64_t>(res_.prompt_ids.size())}, at::kLong);
      for (size_t i = 0; i < res_.prompt_ids.size(); ++i) ids.data_ptr<int64_t>()[i] = res_.prompt_ids[i];
      at::Tensor out = model.forward(ids, kv_, /*last_only=*/true).contiguous();
      std::memcpy(logits_.data(), out.data_ptr<float>(), logits_.size() * sizeof(float));
    }));
    t_decode0_ns_ = clock_->now_ns();
    res_.t_prefill_s = static_cast<double>(t_decode0_ns_ - t0) * 1e-9;
    prefilled_ = true;
  } else {
    FROST_RETURN_IF_ERROR(torch_call([&] {
      if (fast_decode_) {
        const float* out = model.decode_step(last_token_, kv_, scratch_);
        std::memcpy(logits_.data(), out, logits_.size() * sizeof(float));
      } else {
        at::Tensor ids = at::full({1}, static_cast<int64_t>(last_token_), at::kLong);
        at::Tensor out = model.forward(ids, kv_, /*last_only=*/true).contiguous();
        std::memcpy(logits_.data(), out.data_ptr<float>(), logits_.size() * sizeof(float));
      }
    }));
    ++res_.n_decode_steps;
  }

  // 2. sample, stream, and decide whether this was the last token
  const SampledToken tok = sampler_.sample(logits_.data());
  const auto index = static_cast<int32_t>(res_.ids.size());
  if (index == 0) res_.t_first_token_s = static_cast<double>(clock_->now_ns() - t_start_ns_) * 1e-9;
  if (stop_.is_stop_token(tok.id)) {
    res_.stop_reason = absl::StrCat("token:", tok.id);
    finish(FinishReason::kStop, on_token);
    return true;
  }
  res_.ids.push_back(tok.id);
  TokenEvent ev;
  ev.id = tok.id;
  ev.index = index;
  ev.logprob = tok.logprob;
  ev.top_logprobs = tok.top;
  const StopResult sr = stop_.on_text(detok_ ? detok_->push(tok.id) : std::string());
  ev.text = sr.emit;
  emit(std::move(ev), on_token);
  if (sr.stopped) {
    res_.stop_reason = sr.matched;
    finish(FinishReason::kStop, on_token);
    return true;
  }
  if (index + 1 >= params_.max_new_tokens) {  // length: no forward for a token never sampled
    finish(FinishReason::kLength, on_token);
    return true;
  }
  last_token_ = tok.id;
  return false;
}

}  // namespace frost
