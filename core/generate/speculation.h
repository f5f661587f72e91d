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
// How many tokens to draft: a cost model, not a fixed k (the choice here; vLLM and SGLang draft a fixed k,
// llama.cpp a fixed k with a minimum match). A verification row pays off only when the step it may save is
// worth more than the row. RoundCost fits a decode round's time (the engine's whole round: drafting to
// emitting) as a + b·rows over the recent rounds; in a round of B decoding sequences (R rows) the engine
// makes B tokens for a + b·R seconds, and the j-th drafted token of a sequence adds one row (b) that yields a
// token with probability α^j (α: that sequence's recent acceptance per drafted token). So the j-th token is
// worth drafting iff α^j > θ = B·b / (a + b·R), and a sequence drafts d = max{j ≤ k : α^j > θ} tokens. Where
// a step is bound by reading the weights (a ≫ b: a large model at small batch) θ is small and drafts are
// long; where a row costs much of what a round costs (stories260K on a CPU: its 1 MB of weights sit in cache
// and each row's attention and GEMMs are compute, b ≈ 0.3·(a + b) at 300 positions) drafts are short and only
// where acceptance is high; at a large batch (θ → 1) nothing is drafted — so speculation never slows a
// workload down by more than its probes. α is a decayed average with a prior (Beta(1, 1)); a sequence whose α
// does not clear θ probes with one token after 4, 8, … 64 steps (doubling while probes fail), which costs at
// most one row per 64 steps and lets a sequence that starts repeating text come back. Jump-forward tokens go
// through the same rule (their α is learnt the same way: a grammar-forced text is written with the drafted
// tokens or not). One α for every draft position, not one per position (tried: a suffix drafter's later
// tokens are accepted less often than its first, so per-position figures drafted shorter and the reuse
// workload lost a fifth of its speedup; the fitted b is a little high, which the single α's optimism happens
// to offset).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/generate/drafter.h"
#include "core/generate/spec_options.h"

namespace frost {

// The suffix tries' depth (SuffixOptions::max_depth) for the sequences' own and the engine's shared one: 16
// (Arctic's default is 64 for agentic traces): per sequence ≤ 64·16 bytes per token of its own trie
// (drafter.h), ~0.8 KB measured. Matches are capped at 16 - k tokens so that a walk has room for k tokens
// (suffix_match_cap; 12 at k = 4, where stories260K accepts a drafted first token 85-94% of the time).
inline constexpr int kSuffixDepth = 16;

// The step time as a + b·rows, by exponentially weighted least squares over the recent decode steps (weight
// 0.99 per step of age: a window of ~100 steps). The engine observes only steps without prompt rows: a prompt
// chunk's rows share their K / V reads and cost less per row than a decode or draft row, which would make
// drafts look cheaper than they are. What it observes is the engine's whole round (drafting, scheduling, the
// forward, sampling or verification, emitting; not its waits for requests): a round's fixed part is what one
// more accepted token saves, so a forward-only a (the executor's time) would set θ too high at batch 1, where
// the rest of the round is a fifth of it on a small model. The drafting phase is taken out of the fit and
// added back as its average per round (d): a drafter catching up after a pause drafts in the same round, so
// its catch-up time came with more rows and read as per-row cost (θ swung between 0.1 and 0.9 at batch 1 over
// one run, and a run that started high drafted little and kept it high: 1.16x instead of 1.75x on the reuse
// workload). θ = B·b / (a + d + b·R). Engine thread only.
class RoundCost {
 public:
  // A decode round of `rows` rows that took `seconds`, `draft_seconds` of them drafting.
  void observe(int64_t rows, double seconds, double draft_seconds = 0.0);
  // θ for a step of `seqs` decoding sequences and `rows` rows before drafts; while the recent rows do not
  // vary enough to separate a from b, or their slope does not stand out of the times' noise (speculation.cc
  // fit()), the per-row share of the last fit, or `fallback` before any fit.
  double threshold(int64_t seqs, int64_t rows, double fallback);
  double fixed_s() const;    // a (drafting excluded)
  double per_row_s() const;  // b
  double draft_s() const { return d_; }  // d

 private:
  struct Fit {
    double a = 0, b = 0;
  };
  // The fit of the recent rounds, once the rows varied and the slope stands out of the noise
  // (speculation.cc); nullopt before.
  std::optional<Fit> fit() const;
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0, syy_ = 0;
  double a_ = -1, b_ = 0;  // the last fit (a_ < 0: none yet)
  double d_ = 0;           // drafting per round, decayed average
  int outliers_ = 0;       // rounds in a row left out as preempted (observe())
};

class Speculation {
 public:
  // method: kNgram or kSuffix (a drafter), or kOff (jump-forward only); k >= 1. `shared` (suffix only) may be
  // null; it must outlive this.
  Speculation(SpecMethod method, int32_t k, int32_t vocab_size, const SuffixCache* shared);

  SpecMethod method() const { return method_; }
  // How many tokens to draft this step at threshold θ (above): 0..k, or 1 for a due probe. Counts the steps
  // between probes.
  int32_t length(double theta);
  // The drafter's proposal for `tokens` (prompt + output so far), at most n tokens (n = 0, or no drafter: none;
  // the drafter still indexes the tokens).
  void propose(absl::Span<const int32_t> tokens, int32_t n, std::vector<int32_t>* out);
  // After verification: `drafted` tokens verified, `accepted` of them.
  void record(int32_t drafted, int32_t accepted);
  double acceptance() const { return (acc_ + 1) / (tot_ + 2); }  // α

 private:
  SpecMethod method_;
  int32_t k_;
  std::unique_ptr<Drafter> drafter_;  // null: jump-forward only
  double acc_ = 0, tot_ = 0;          // decayed accepted / drafted tokens
  int32_t probe_gap_ = 4;             // steps between probes while α does not clear θ
  int32_t since_probe_ = 0;
};

}  // namespace frost
