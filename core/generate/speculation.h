#pragma once
// Speculation: one sequence's speculative decoding (issue 52) as the engine runs it — which drafter, how many
// tokens to draft this step, and what acceptance taught it. The engine (core/generate/engine.cc) owns one per
// request that speculates, on its thread:
//
//   before schedule  draft(): the drafter's proposal for the sequence's tokens, k tokens at most (k adapts,
//                    below); Sequence::shape_draft() then cuts it at the first token the constraint refuses
//                    and extends it with grammar-forced tokens (jump-forward).
//   schedule         the scheduler gives the sequence 1 + d query rows (its last token, then the d drafted
//                    ones) when the step's token budget and the executor's logit rows allow, else fewer.
//   update           Sequence::verify() keeps the accepted prefix plus one token (spec_verify.h); the KV of
//                    the rejected rows is truncated before the step's blocks are published; record().
//
// Adaptive draft length (the choice here; vLLM and SGLang use a fixed k, llama.cpp a fixed k with a minimum
// match): each draft of d tokens of which a were accepted updates an average of accepted tokens per draft,
// ema = (ema + a) / 2 (starting at k: optimistic). The next draft proposes at most clamp(ceil(ema) + 1, 1, k)
// tokens, so a sequence that keeps accepting drafts k and one whose drafts fail shrinks to 1. A draft with
// nothing accepted also pauses drafting for `cool` steps, cool doubling 1, 2, 4 … 32 while drafts keep
// failing and resetting to 0 at the first acceptance: on text the drafter cannot predict, at most one step
// in ~32 carries a wasted row. Jump-forward tokens are certain (the grammar allows nothing else) and are
// neither limited by k nor counted against it.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/generate/drafter.h"
#include "core/generate/spec_options.h"

namespace frost {

// The suffix tries' depth (SuffixOptions::max_depth) for the sequences' own and the engine's shared one: 16
// (Arctic's default is 64 for agentic traces): per sequence ≤ 64·16 bytes per token of its own trie
// (drafter.h), ~0.8 KB measured; matches beyond 15 tokens add little acceptance on chat-length text.
inline constexpr int kSuffixDepth = 16;

// engine.speculative's ranges: INVALID_ARGUMENT naming the field and value.
absl::Status check_speculative_options(const SpeculativeOptions& o);

class Speculation {
 public:
  // method: kNgram or kSuffix; k >= 1. `shared` (suffix only) may be null; it must outlive this.
  Speculation(SpecMethod method, int32_t k, int32_t vocab_size, const SuffixCache* shared);

  SpecMethod method() const { return method_; }
  // The drafter's proposal for `tokens` (prompt + output so far), at most the adaptive length and `limit`;
  // empty while cooling down or when limit is 0 (the drafter still indexes the tokens).
  void draft(absl::Span<const int32_t> tokens, int32_t limit, std::vector<int32_t>* out);
  // After verification: `drafted` tokens proposed by the drafter (jump-forward excluded), `accepted` of them.
  void record(int32_t drafted, int32_t accepted);
  int32_t k() const { return k_; }
  int32_t next_length() const;  // what draft() asks the drafter for now (0 while cooling down)

 private:
  SpecMethod method_;
  int32_t k_;
  std::unique_ptr<Drafter> drafter_;
  double ema_;        // accepted tokens per draft
  int32_t cool_ = 0;  // steps to skip after a failed draft
  int32_t skip_ = 0;  // steps still skipped
};

}  // namespace frost
