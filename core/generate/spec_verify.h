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
// Greedy (temperature 0 or top_k 1): d_i is accepted while it equals argmax p_i (ties → lowest
// id); at the first mismatch the appended token is that argmax. This is literally sample() called
// row by row, stopping at the first disagreement, so greedy output is identical token for token
// to non-speculative decoding. No RNG is used.
//
// Sampling: the standard accept/reject rule (Leviathan et al. 2023, Chen et al. 2023) for a point
// mass q: accept d_i with probability min(1, p_i(d_i) / q_i(d_i)) = p_i(d_i); on rejection draw
// from the residual max(0, p_i − q_i) renormalized, which for a point mass is p_i with d_i removed
// and the rest renormalized. Then P(token = d_i) = p_i(d_i) and, for x ≠ d_i,
// P(token = x) = (1 − p_i(d_i)) · p_i(x) / (1 − p_i(d_i)) = p_i(x): every appended token is
// distributed exactly as p_i given the tokens before it, i.e. as without speculation. A draft
// outside p_i's support (cut by top_k / top_p / min_p / the mask, or an id outside [0, V)) has
// p_i(d_i) = 0 and is always rejected; one with p_i(d_i) = 1 is always accepted.
//
// RNG consumption (the sampler's own mt19937_64, one 64-bit output per uniform, as sample()):
//   - each tested draft: one uniform u in [0, 1); accepted iff u < p_i(d_i) (p_i(d_i) computed in
//     double over the candidates in the sampler's order) — consumed even when p_i(d_i) is 0 or 1;
//   - a rejection: one more uniform, the inverse-CDF draw over p_i without d_i (the candidates
//     in the sampler's order, d_i skipped);
//   - all accepted: the bonus is Sampler::sample(L_k) itself (one uniform).
// So a call that accepts a of k drafts consumes a + 2 uniforms when a < k and k + 1 when a = k;
// k = 0 is exactly one Sampler::sample(L_0). A seeded run reproduces given the same drafts and
// rows; its sampled tokens need NOT equal the non-speculative run's for the same seed (the draws
// are spent differently) — only their distribution is the same. Greedy output does equal it.
//
// History: row i is processed with d_0..d_{i-1} counted by repetition / presence / frequency
// penalties; after the call the sampler's history holds exactly the appended tokens, as if they
// had been sampled one by one. Logprobs (params.logprobs >= 0) of the token appended from row i
// are those Sampler::sample reports for row i: log_softmax of the RAW L_i, top list included.
//
// Stop conditions are the caller's: the engine cuts the appended list after a stop token, a stop
// string or max_tokens and drops the rest. The sampler's history then holds the dropped tokens
// too, and its RNG state equals that of a run that consumed this call's draws; both are harmless
// because the sequence ends there. (A caller that continues a sequence after a cut must not.)
//
// Cost: per tested row, steps 1-8 of the sampler (O(V) plus the truncation's partial sort) and
// logprobs when asked; the bonus and greedy rows cost one sample(). Not thread-safe, like Sampler.
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
