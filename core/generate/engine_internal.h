#pragma once
// The engine thread's records (core/generate/engine.h), shared by engine.cc (the round) and engine_spec.cc
// (speculative decoding's part of the round). Internal to core/generate.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/generate/engine.h"
#include "core/generate/scheduler.h"
#include "core/generate/sequence.h"
#include "core/generate/speculation.h"

namespace frost {

// A validated request waiting for the engine thread to pick it up.
struct Engine::Pending {
  std::vector<int32_t> prompt;
  SamplingParams params;
  KvCodecKind codec = KvCodecKind::kF32;
  GenerationRequest::KvRepair repair_mode = GenerationRequest::KvRepair::kAuto;
  // kvsplice: the KVSplice active at submit (the sequence starts with the one active at admission, this
  // one when the slot was emptied in between).
  std::shared_ptr<const KvSpliceSlot::Active> splice;
  // Structured output: the compiled constraint (shared with every request of the same spec) and the
  // vocabulary its matcher walks.
  std::shared_ptr<const constrain::CompiledConstraint> constraint;
  std::shared_ptr<const constrain::TokenVocab> vocab;
  // Speculative decoding, resolved against the server's default (engine_spec.cc): kOff, kNgram or kSuffix, k.
  SpecMethod spec_method = SpecMethod::kOff;
  int32_t spec_k = 0;
  bool jump_forward = false;   // a constrained request drafts what its grammar forces
  int32_t n_prompt_given = 0;  // for a result before admission
  std::shared_ptr<TokenSink> sink;
  std::shared_ptr<CancelToken> cancel;
  int64_t t_submit_ns = 0;
};

// One callback for the delivery thread: a token event, or the final result (plus what the counters need).
struct Engine::Delivery {
  std::shared_ptr<TokenSink> sink;
  std::optional<TokenEvent> token;
  std::optional<absl::StatusOr<GenerationResult>> result;
  std::string codec;  // result only: counters
  bool repaired = false, spliced = false;
  bool unadmitted = false;  // result only: never reached the engine thread (a refused or cancelled compile)
  std::vector<int32_t> suffix_output;  // result only: the output to add to the engine's SuffixCache
};

// A request the engine thread holds: its sequence state, its scheduler entry (with its paged cache while it
// runs) and what it was admitted with. The scheduler's entries point back at it (SchedEntry::owner).
struct EngineRequest {
  std::unique_ptr<Engine::Pending> req;
  std::unique_ptr<Sequence> seq;
  SchedEntry entry;
  int64_t t_admit_ns = 0;  // first time it ran
  int64_t t_first_ns = 0;  // its first token
  std::string kv_repair;   // the repair operator it runs with ("" = none)
  std::string kv_splice;   // the KVSplice it stores its KV with ("" = none)
  // Speculative decoding (engine_spec.cc): its drafter and policy (null: it never drafts; a drafter method or
  // jump-forward under a constraint makes one), which tokens of this round's draft the grammar forced, and
  // its totals.
  std::unique_ptr<Speculation> spec;
  std::vector<uint8_t> forced;
  int32_t n_draft_tokens = 0, n_accepted_tokens = 0;
  bool done = false;
};

// The engine thread's state: the scheduler over the books, the requests it holds, this round's callbacks
// for the delivery thread, and the executor's step buffers.
struct Engine::Loop {
  Loop(const SchedulerConfig& sc, KvBlockBooks* books) : sched(sc, books) {}
  Scheduler sched;
  std::vector<std::unique_ptr<EngineRequest>> actives;
  std::vector<Delivery> out;  // handed to the delivery thread in one batch at the end of the round
  uint64_t order = 0;
  ExecStep exec_step;
  ExecResult exec_result;
  std::vector<SampledToken> toks;
  std::vector<Sequence*> mask_fills;  // this step's constrained host-sampled rows (engine_masks.h)
  std::vector<EngineRequest*> to_sample;
  std::vector<int64_t> first_row;      // to_sample[i]'s first logits row in the step's result
  std::vector<int32_t> drafted;        // to_sample[i]'s draft rows this step (0: a plain row)
  std::vector<DraftVerdict> verdicts;  // to_sample[i]'s tokens when it verified a draft
  std::vector<int32_t> proposal;       // draft() scratch
  RoundCost cost;                      // a decode round's time as a + b·rows (speculation.h)
  int64_t t_round_ns = 0;              // when this round's draft() began (its work, not intake's waits)
  int64_t t_draft_ns = 0;              // how long this round's draft() took
  bool decode_only = false;            // this round's step had no prompt rows (RoundCost learns from those)
  int64_t t_schedule_ns = 0;           // this round's schedule()
  // The callback that queues a request's token events for this round's delivery.
  TokenCallback emit(EngineRequest& a) {
    std::shared_ptr<TokenSink> sink = a.req->sink;
    return [this, sink](const TokenEvent& ev) {
      Delivery d;
      d.sink = sink;
      d.token = ev;
      out.push_back(std::move(d));
    };
  }
};

}  // namespace frost
