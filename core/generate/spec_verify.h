#pragma once
// Speculative decoding's verification rule (issue 52), on plain float arrays, beside the Sampler.
//
// A drafter proposes k tokens d_0..d_{k-1} for one sequence; the target model scores the prefix
// + d_0..d_{k-1} in one step and returns k + 1 logits rows L_0..L_k, row i being the logits after
// the prefix + d_0..d_{i-1} (so L_0 is what a plain step would have produced). verify_draft()
// decides how many drafts to keep (a, 0 <= a <= k) and returns the a + 1 tokens to append:
// d_0..d_{a-1}, then one more token — the correction at position a when d_a was rejected, or the
// bonus token drawn from L_k when all k were accepted. Each comes with its SampledToken.
//
// The drafter is deterministic (prompt lookup, suffix decoding, a greedy draft model): its
// proposal is a point mass q_i = δ(d_i). p_i below is the fully processed distribution of row i —
// exactly what Sampler::sample would draw from at that position: penalties with the history
// extended by d_0..d_{i-1}, the row's constraint mask, temperature, top_k, top_p, min_p.
//
// The rule: row by row, draw the token exactly as Sampler::sample would (p_i, the sampler's own RNG), and
// keep going while it equals the draft: token i is sample(L_i); if it equals d_i the draft is accepted and
// row i + 1 is drawn next, else it is the correction and verification stops; all k accepted → the bonus is
// sample(L_k).
//
// Why this rule (the choice here): for a deterministic draft it is the standard accept/reject rule
// (Leviathan et al. 2023, Chen et al. 2023) with its randomness coupled to plain decoding. The standard
// rule accepts d_i with probability min(1, p_i(d_i) / q_i(d_i)) = p_i(d_i) (q_i = δ(d_i)) and on rejection
// draws from p_i without d_i, renormalized; drawing x ~ p_i and accepting iff x = d_i has the same
// acceptance probability p_i(d_i), and given a rejection x is distributed as p_i without d_i
// renormalized — the same joint law, so the output is distributed exactly as without speculation. What
// it adds: each appended token consumes the same uniform, in the same order, as plain decoding would, so
// a seeded request yields the same tokens with or without speculation, whatever the drafter proposed,
// the batch or the step in which speculation was switched off — and greedy (no RNG) is literally sample()
// row by row. A draft outside p_i's support (cut by top_k / top_p / min_p / the mask, or an id outside
// [0, V)) is never drawn, hence always rejected; a token with p_i = 1 (a grammar-forced one) always
// accepted.
//
// RNG consumption: exactly that of sample() on each of the a + 1 rows it draws (one uniform each unless
// greedy), i.e. of plain decoding of the same a + 1 tokens.
//
// History: row i is processed with d_0..d_{i-1} counted by repetition / presence / frequency penalties
// (they were sampled, hence recorded); after the call the sampler's history holds exactly the appended
// tokens. Logprobs (params.logprobs >= 0) of each appended token are those sample() reports for its row:
// log_softmax of the RAW L_i, top list included.
//
// Stop conditions are the caller's: the engine cuts the appended list after a stop token, a stop
// string or max_tokens and drops the rest. The sampler's history then holds the dropped tokens too and
// its RNG has consumed their draws; harmless, because the sequence ends there.
//
// Cost: one sample() per row drawn (a + 1 of the k + 1). Not thread-safe, like Sampler.
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/generate/sampler.h"

namespace frost {

struct DraftVerdict {
  int32_t accepted = 0;              // a: how many leading drafts were kept
  std::vector<SampledToken> tokens;  // a + 1 tokens to append: d_0..d_{a-1}, then correction / bonus
};

// draft: the k >= 0 drafted ids. logits: [(k + 1) × V] row-major raw target logits, read only
// (row i at logits + i·V). allowed: empty (unconstrained) or k + 1 constrained-decoding masks in
// Sampler::sample's format, row i's mask being the grammar's state after d_0..d_{i-1} (nullptr =
// that row unconstrained). Advances `sampler`'s history and RNG as described above.
DraftVerdict verify_draft(Sampler& sampler, absl::Span<const int32_t> draft, const float* logits,
                          absl::Span<const uint32_t* const> allowed = {});

}  // namespace frost
