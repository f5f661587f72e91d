#pragma once
// Sequence: one generation in progress — its tokens, sampler, stop conditions and incremental detokenizer —
// as a state machine that does not own the model pass. The engine (core/generate/engine.h) batches many:
// it computes the KV of tokens() in whatever steps and chunks it schedules, then hands the logits of the last
// one to sample() and accept(). The Generator (the reference loop) drives one with step(), which runs the
// model itself.
//
// Invariant the callers keep: logits are computed once the cache holds exactly tokens() (the prompt, then
// every sampled id); they predict the next token. After a preemption the engine recomputes the cache from
// tokens() and continues: sampler state and streamed text are untouched.
//
// Not thread-safe; sample() of different sequences may run in parallel (it touches only this sequence).
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/cancel.h"
#include "core/common/clock.h"
#include "core/exec/step_executor.h"
#include "core/generate/detokenizer.h"
#include "core/generate/request.h"
#include "core/constrain/token_mask.h"
#include "core/generate/sampler.h"
#include "core/generate/spec_verify.h"
#include "core/generate/stop_condition.h"
#include "core/model/model_loader.h"

namespace frost {

class Sequence {
 public:
  // `prompt` must already be validated (ids < vocab, prompt + max_new_tokens <= the context).
  Sequence(const LoadedModel& model, std::vector<int32_t> prompt, const SamplingParams& params, const Clock* clock);

  // The prompt, then every token sampled so far (the stop token excluded).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t n_prompt() const { return res_.n_prompt; }
  int64_t n_generated() const { return static_cast<int64_t>(res_.ids.size()); }

  // Finishes the sequence (CANCELLED / DEADLINE) when `cancel` says so; true then.
  bool check_cancel(const CancelToken& cancel, const TokenCallback& on_token);
  // The next token from the logits [V] of the last token of tokens(). Sampler only: safe to run for different
  // sequences in parallel.
  SampledToken sample(const float* logits);
  // Sampling on a device instead (core/exec/step_executor.h): how the next token may be drawn there
  // (on_device false when this sequence needs the host sampler: penalties, logprobs, or `device_ok` false);
  // a non-greedy plan consumes the sampler's draw. Then sampled_on_device() with the device's id. A
  // constrained sequence's plan carries its mask (computed now: the device needs it before the step), valid
  // until accept(); one whose mask the constraint cannot vouch for (Matcher::health) stays on the host, where
  // accept() ends it with that error.
  RowSampling plan_sample(bool device_ok);
  // Computes the constrained mask of the next token now, so that sample() finds it ready (the engine does it
  // on its mask thread while the step runs: engine_masks.h); nothing when unconstrained. Touches only this
  // sequence's matcher: safe in parallel with other sequences and with the executor.
  void fill_mask() {
    if (matcher_) matcher_->allowed();
  }
  SampledToken sampled_on_device(int32_t id) { return sampler_.accept_device_token(id); }
  // Constrained decoding: from now on sample() masks every token `m` does not allow, accept() advances it,
  // and the sequence ends (FinishReason::kStop, stop_reason "constraint") once the output is complete and
  // nothing can follow. The mask is computed lazily by sample() or plan_sample() unless fill_mask() came
  // first.
  void set_constraint(std::unique_ptr<constrain::Matcher> m) { matcher_ = std::move(m); }
  bool constrained() const { return matcher_ != nullptr; }
  // How the host samples a masked row: over the allowed ids alone where few are, or always the dense
  // reference (Sampler::set_sparse_masks; the same tokens either way).
  void set_sparse_masks(bool on) { sampler_.set_sparse_masks(on); }
  // Applies a token from sample(): stop token / strings, detokenization, the event through on_token, the
  // length limit. Returns true once the sequence has finished (result() is then final). `new_step`: false for
  // the second and later tokens one verified draft appended (they took no forward pass of their own).
  bool accept(const SampledToken& tok, const TokenCallback& on_token, bool new_step = true);

  // Speculative decoding (core/generate/speculation.h). shape_draft() turns a drafter's proposal into the
  // draft to verify: unconstrained, the proposal as it is; constrained, its leading tokens the grammar allows
  // at their positions (walked through the matcher, then rewound) and, with jump_max > 0, up to jump_max
  // jump-forward tokens, before, between or after them: where exactly one token is allowed, that token (always
  // accepted); where the grammar forces the next bytes (keys, punctuation of a schema), the longest allowed
  // token spelling a prefix of them (Matcher::jump_token; accepted when the model writes the forced text that
  // way); an EOS id is never drafted. forced[i] = 1 marks jump-forward tokens. It saves each row's mask for verify(). The scheduler may use
  // only a prefix of the draft.
  void shape_draft(std::vector<int32_t>* draft, std::vector<uint8_t>* forced, int32_t jump_max);
  // The a + 1 tokens to append after `draft` (a prefix of the last shape_draft's) got its rows' logits
  // [(draft.size() + 1) × V]: spec_verify.h's rule with the saved masks.
  DraftVerdict verify(absl::Span<const int32_t> draft, const float* logits);

  // The reference loop: one forward pass on its own cache (the whole prompt on the first call — through
  // forward_batch when `fast`, else the reference forward() — then one token: decode_step when `fast`),
  // sampling, events. `kv` is reset on the first call. Returns true once finished. Errors are internal
  // failures of tensor code.
  absl::StatusOr<bool> step(SequenceKv& kv, DecodeScratch& scratch, bool fast, const TokenCallback& on_token,
                            const CancelToken& cancel);

  bool finished() const { return done_; }
  const GenerationResult& result() const { return res_; }
  GenerationResult take_result() { return std::move(res_); }
  // The outcome: the result, or the error that ended the sequence (a constraint that could not be tracked
  // exactly, or that no token of the vocabulary can continue: never a silent "stop").
  absl::StatusOr<GenerationResult> take_outcome() {
    if (!error_.ok()) return error_;
    return std::move(res_);
  }

 private:
  void emit(TokenEvent&& ev, const TokenCallback& on_token);
  void finish(FinishReason reason, const TokenCallback& on_token);
  absl::Status constraint_health() const;

  const LoadedModel& model_;
  SamplingParams params_;
  const Clock* clock_;

  Sampler sampler_;
  std::unique_ptr<constrain::Matcher> matcher_;  // null: unconstrained
  std::vector<std::shared_ptr<const constrain::StateMask>> draft_masks_;  // shape_draft(): row i's mask
  std::vector<const uint32_t*> draft_words_;                             // verify()'s view of them
  std::vector<int32_t> proposal_;                                        // shape_draft() scratch
  std::optional<IncrementalDetokenizer> detok_;
  StopChecker stop_;
  std::vector<int32_t> tokens_;  // prompt + sampled ids
  std::vector<float> logits_;    // [V] of the last forward pass (step() only)
  GenerationResult res_;
  int64_t t_start_ns_ = 0;    // construction
  int64_t t_decode0_ns_ = 0;  // first token (end of the prefill)
  bool done_ = false;
  absl::Status error_;  // set when the sequence ended in error (take_outcome())
};

}  // namespace frost
