#include "core/generate/sequence.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/field_error.h"
#include "core/common/status_macros.h"
#include "core/common/torch_status.h"

namespace frost {

Sequence::Sequence(const LoadedModel& model, std::vector<int32_t> prompt, const SamplingParams& params,
                   const Clock* clock)
    : model_(model),
      params_(params),
      clock_(clock),
      sampler_(params, static_cast<int32_t>(model.config.n_vocab)),
      stop_(params, model.config.eos_ids) {
  t_start_ns_ = clock_->now_ns();
  sampler_.add_prompt(prompt);
  if (model_.tokenizer) detok_.emplace(*model_.tokenizer);
  tokens_ = prompt;
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
  if (t_decode0_ns_ > 0) res_.t_decode_s = static_cast<double>(clock_->now_ns() - t_decode0_ns_) * 1e-9;
  done_ = true;
}

bool Sequence::check_cancel(const CancelToken& cancel, const TokenCallback& on_token) {
  if (done_) return true;
  switch (cancel.state()) {
    case CancelToken::State::kRunning: return false;
    case CancelToken::State::kCancelled: finish(FinishReason::kCancelled, on_token); return true;
    case CancelToken::State::kDeadlineExceeded: finish(FinishReason::kDeadline, on_token); return true;
  }
  return false;
}

// Why the constraint cannot be followed exactly from here (OK when it can): Matcher::health(), prefixed so that
// the transports name the request's constraint field.
absl::Status Sequence::constraint_health() const {
  const absl::Status st = matcher_->health();
  if (st.ok()) return st;
  return prefix_field(st, "constraint");
}

SampledToken Sequence::sample(const float* logits) {
  if (matcher_) return sampler_.sample(logits, matcher_->allowed().words.data());
  return sampler_.sample(logits);
}

RowSampling Sequence::plan_sample(bool device_ok) {
  RowSampling rs;
  rs.on_device = device_ok && sampler_.device_eligible();
  if (rs.on_device && matcher_) {
    const constrain::TokenBitmask& allowed = matcher_->allowed();
    rs.on_device = matcher_->health().ok() && allowed.n_tokens == sampler_.vocab_size();
    if (rs.on_device) rs.mask = allowed.words.data();
  }
  if (rs.on_device) sampler_.plan_device_draw(&rs.greedy, &rs.temperature, &rs.top_k, &rs.top_p, &rs.min_p, &rs.u);
  return rs;
}

bool Sequence::accept(const SampledToken& tok, const TokenCallback& on_token, bool new_step) {
  if (done_) return true;
  const int64_t now = clock_->now_ns();
  const auto index = static_cast<int32_t>(res_.ids.size());
  if (t_decode0_ns_ == 0) {  // the first token ends the prefill
    t_decode0_ns_ = now;
    res_.t_first_token_s = static_cast<double>(now - t_start_ns_) * 1e-9;
    if (res_.t_prefill_s == 0) res_.t_prefill_s = res_.t_first_token_s;
  } else {
    if (new_step) ++res_.n_decode_steps;  // a forward pass after the prefill produced this token
    ++res_.n_decode_tokens;
  }
  if (matcher_) {
    // The sampler drew from the mask. A mask a recogniser limit truncated, or an empty one (the constraint
    // needs bytes no token spells), means the constraint cannot be followed exactly: the request ends with
    // that error, never with a silent "stop" or a token the mask refused.
    absl::Status st = constraint_health();
    if (st.ok() && !matcher_->allowed().test(tok.id)) {
      st = prefix_field(absl::FailedPreconditionError(
                            absl::StrCat("token ", tok.id, " was drawn outside the constraint's mask")),
                        "constraint");
    }
    if (!st.ok()) {
      error_ = std::move(st);
      res_.stop_reason = "constraint";
      finish(FinishReason::kStop, on_token);
      return true;
    }
  }
  if (stop_.is_stop_token(tok.id) || (matcher_ && std::find(model_.config.eos_ids.begin(), model_.config.eos_ids.end(), tok.id) != model_.config.eos_ids.end())) {
    // (a constrained sequence's EOS ends it even with ignore_eos: the mask allowed it only once complete)
    res_.stop_reason = absl::StrCat("token:", tok.id);
    finish(FinishReason::kStop, on_token);
    return true;
  }
  if (matcher_) {
    // The mask allowed only tokens the constraint can take. A token it refuses, or a recogniser that had to
    // drop a branch, means the constraint could not be followed exactly: the request ends with that error
    // (never a silent "stop" with an output the constraint does not admit).
    absl::Status st = matcher_->accept_token(tok.id);
    if (!st.ok()) st = prefix_field(st, "constraint");
    if (st.ok()) st = constraint_health();
    if (!st.ok()) {
      error_ = std::move(st);
      res_.stop_reason = "constraint";
      finish(FinishReason::kStop, on_token);
      return true;
    }
  }
  res_.ids.push_back(tok.id);
  tokens_.push_back(tok.id);
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
  if (matcher_ && matcher_->must_end()) {  // the constrained output is complete and nothing can follow
    res_.stop_reason = "constraint";
    finish(FinishReason::kStop, on_token);
    return true;
  }
  if (index + 1 >= params_.max_new_tokens) {  // length: no forward for a token never sampled
    finish(FinishReason::kLength, on_token);
    return true;
  }
  return false;
}

void Sequence::shape_draft(std::vector<int32_t>* draft, std::vector<uint8_t>* forced, int32_t jump_max) {
  draft_masks_.clear();
  if (!matcher_) {
    forced->assign(draft->size(), 0);
    return;
  }
  proposal_.swap(*draft);
  draft->clear();
  forced->clear();
  constrain::Matcher& m = *matcher_;
  m.allowed();  // computed before the mark, so the rewound matcher keeps this position's mask for sample()
  constrain::Matcher::Mark start = m.mark();
  size_t next = 0;        // the proposal's token for this position, while the draft still follows it
  bool follows = true;
  int32_t n_forced = 0;
  const std::vector<int32_t>& eos = model_.config.eos_ids;
  for (;;) {
    std::shared_ptr<const constrain::StateMask> mask = m.allowed_shared();
    draft_masks_.push_back(mask);  // row draft->size()'s mask, whatever comes next
    if (!m.health().ok() || m.finished()) break;  // a truncated mask: the token is sampled plainly there
    int32_t tok = -1;
    bool is_forced = false;
    if (n_forced < jump_max && mask->bits.count() == 1) {
      for (size_t w = 0; w < mask->bits.words.size() && tok < 0; ++w)
        if (const uint32_t bits = mask->bits.words[w]; bits != 0)
          tok = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
      is_forced = true;
    } else if (follows && next < proposal_.size() && mask->bits.test(proposal_[next])) {
      tok = proposal_[next];
    } else if (n_forced < jump_max && (tok = m.jump_token()) >= 0) {
      is_forced = true;  // the grammar forces the text; the model verifies this tokenization of it
    } else {
      break;
    }
    if (std::find(eos.begin(), eos.end(), tok) != eos.end()) break;
    if (!m.accept_token(tok).ok()) break;
    if (follows && (next >= proposal_.size() || proposal_[next] != tok)) follows = false;
    ++next;
    n_forced += is_forced ? 1 : 0;
    draft->push_back(tok);
    forced->push_back(is_forced ? 1 : 0);
  }
  m.rewind(std::move(start));
}

DraftVerdict Sequence::verify(absl::Span<const int32_t> draft, const float* logits) {
  if (!matcher_) return verify_draft(sampler_, draft, logits);
  draft_words_.clear();
  for (size_t i = 0; i <= draft.size(); ++i) draft_words_.push_back(draft_masks_[i]->bits.words.data());
  return verify_draft(sampler_, draft, logits, draft_words_);
}

absl::StatusOr<bool> Sequence::step(SequenceKv& kv, DecodeScratch& scratch, bool fast, const TokenCallback& on_token,
                                    const CancelToken& cancel) {
  if (done_) return true;
  if (check_cancel(cancel, on_token)) return true;
  c10::InferenceMode inference_mode;
  const Transformer& model = *model_.model;
  if (logits_.empty()) logits_.resize(static_cast<size_t>(model_.config.n_vocab));
  const size_t V = logits_.size();

  // 1. one forward pass: the prompt, or the last sampled token
  if (res_.ids.empty() && t_decode0_ns_ == 0) {
    const int64_t t0 = clock_->now_ns();
    FROST_RETURN_IF_ERROR(torch_call([&] {
      kv.reset();
      const auto n = static_cast<int64_t>(tokens_.size());
      if (fast) {  // the batched kernels with one sequence: bit-identical to the engine's prefill
        BatchScratch bs;
        const float* out = model.forward_batch({StepSeq{&kv, tokens_.data(), n, true}}, bs);
        std::memcpy(logits_.data(), out, V * sizeof(float));
      } else {
        at::Tensor ids = at::empty({n}, at::kLong);
        for (int64_t i = 0; i < n; ++i) ids.data_ptr<int64_t>()[i] = tokens_[static_cast<size_t>(i)];
        at::Tensor out = model.forward(ids, kv, /*last_only=*/true).contiguous();
        std::memcpy(logits_.data(), out.data_ptr<float>(), V * sizeof(float));
      }
    }));
    res_.t_prefill_s = static_cast<double>(clock_->now_ns() - t0) * 1e-9;
  } else {
    const int32_t last = tokens_.back();
    FROST_RETURN_IF_ERROR(torch_call([&] {
      if (fast) {
        const float* out = model.decode_step(last, kv, scratch);
        std::memcpy(logits_.data(), out, V * sizeof(float));
      } else {
        at::Tensor ids = at::full({1}, static_cast<int64_t>(last), at::kLong);
        at::Tensor out = model.forward(ids, kv, /*last_only=*/true).contiguous();
        std::memcpy(logits_.data(), out.data_ptr<float>(), V * sizeof(float));
      }
    }));
  }
  // 2. sample, stream, and decide whether this was the last token
  return accept(sample(logits_.data()), on_token);
}

}  // namespace frost
