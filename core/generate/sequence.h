#pragma once
// Sequence: one generation in progress, as a step-wise state machine. Generator runs one to
// completion; Engine interleaves many, one forward pass each per round. Each step() is exactly
// one forward pass (the prefill on the first call, then one decode step) followed by sampling.
//
// Not thread-safe; the KV cache and scratch it is given must outlive it and belong to it alone.
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/common/cancel.h"
#include "core/common/clock.h"
#include "core/generate/detokenizer.h"
#include "core/generate/request.h"
#include "core/generate/sampler.h"
#include "core/generate/stop_condition.h"
#include "core/model/model_loader.h"

namespace frost {

class Sequence {
 public:
  // `prompt` must already be validated (ids < vocab, prompt + max_new_tokens <= kv capacity).
  // `kv` is reset here.
  Sequence(const LoadedModel& model, std::vector<int32_t> prompt, const SamplingParams& params, SequenceKv& kv,
           DecodeScratch& scratch, bool fast_decode, const Clock* clock);

  // Polls `cancel`, runs one forward pass, samples and emits the resulting events through
  // `on_token`. Returns true once the sequence has finished (result() is then final).
  // Errors are internal failures of tensor code.
  absl::StatusOr<bool> step(const TokenCallback& on_token, const CancelToken& cancel);

  bool finished() const { return done_; }
  const GenerationResult& result() const { return res_; }
  GenerationResult take_result() { return std::move(res_); }

 private:
  void emit(TokenEvent&& ev, const TokenCallback& on_token);
  void finish(FinishReason reason, const TokenCallback& on_token);
  bool check_cancel(const CancelToken& cancel, const TokenCallback& on_token);

  const LoadedModel& model_;
  SamplingParams params_;
  SequenceKv& kv_;
  DecodeScratch& scratch_;
  bool fast_decode_;
  const Clock* clock_;

  Sampler sampler_;
  std::optional<IncrementalDetokenizer> detok_;
  StopChecker stop_;
  std::vector<float> logits_;  // [V] of the last forward pass
  GenerationResult res_;
  int64_t t_start_ns_ = 0;      // construction
  int64_t t_decode0_ns_ = 0;    // end of prefill
  int32_t last_token_ = -1;     // sampled, not yet fed to the model
  bool prefilled_ = false;
  bool done_ = false;
};

}  // namespace frost
