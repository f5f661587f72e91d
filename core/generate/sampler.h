#pragma once
// Sampler: one request's logits → token, on plain float arrays (no LibTorch).
// V = vocab_size.
//
// Processing order of sample(), as in Hugging Face / vLLM:
//   1. copy the raw logits [V] into a buffer preallocated at construction (input untouched;
//      greedy without penalties reads them in place: one pass, no copy)
//   2. repetition_penalty over the distinct tokens of prompt + generated (HF: l > 0 → l / r,
//      else l * r)
//   3. presence / frequency penalties over generated tokens (OpenAI:
//      l -= presence * (count > 0) + frequency * count)
//   4. temperature == 0 or top_k == 1 → greedy: argmax, ties → lowest id; stop here
//   5. divide by temperature
//   6. top_k: keep the k largest (ties at the boundary → lower ids)
//   7. top_p: nucleus of the renormalized distribution — the fewest most likely tokens whose
//      probability mass is >= top_p (at least one)
//   8. min_p: drop tokens with probability < min_p * max probability
//   9. draw one token from the renormalized remainder with the sampler's own RNG
// NaN logits are treated as -inf.
//
// Randomness: std::mt19937_64 seeded with params.seed (or std::random_device when unset);
// one 64-bit output per non-greedy draw, turned into a uniform double in [0, 1) by us (no
// std::*_distribution, whose output is implementation-defined). Candidates are walked in
// ascending id order, or in (probability desc, id asc) order once top_k / top_p sorted them,
// so a fixed seed gives the same tokens on every run and platform (up to libm's expf, which
// can differ in the last bit between C libraries).
//
// Logprobs (params.logprobs >= 0) are log_softmax of the RAW model logits — before penalties,
// temperature and truncation (vLLM's default), computed in double.
//
// exp is our own (kernels/cpu/exp.h: bit-identical scalar and AVX-512 forms). Plain temperature
// sampling (no top_k / top_p / min_p) runs steps 5 and 9 as vectorised passes over float arrays, with the
// draw locating its block of 64 ids through double block sums first.
//
// Cost per call: a few O(V) passes (greedy without penalties: one); top_k = k adds a
// selection (heap for small k, nth_element + sort of k otherwise); top_p alone sorts only as
// far as its nucleus reaches (64, 256, 1024, ... tokens). No heap allocation unless top
// logprobs are requested (or the penalty history grows).
//
// Speculative decoding verifies a draft against this same processing: core/generate/spec_verify.h.
//
// Not thread-safe: one Sampler per sequence, owned by the thread that decodes it.
#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "core/generate/sampling_params.h"

namespace frost {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t id = 0;
  // log p(id) under log_softmax of the raw logits; 0 when params.logprobs < 0 (not computed).
  float logprob = 0.0f;
  // The min(params.logprobs, V) most likely tokens under the raw logits, logprob descending
  // (ties → lower id); empty when params.logprobs <= 0.
  std::vector<TokenLogprob> top;
};

class Sampler {
 public:
  // `params` must have passed validate_sampling_params(params, vocab_size); vocab_size > 0.
  Sampler(const SamplingParams& params, int32_t vocab_size);
  int32_t vocab_size() const { return n_vocab_; }

  // Adds prompt tokens to the history seen by repetition_penalty (presence / frequency
  // penalties only count generated tokens). Mutates the history; ids outside [0, V) ignored.
  void add_prompt(absl::Span<const int32_t> ids);

  // logits: [V] raw model logits, read only. Picks a token and appends it to the penalty
  // history. Advances the RNG unless the choice is greedy. `allowed` (constrained decoding,
  // core/constrain/token_mask.h): a bitmask over the vocabulary (bit i of word i/32 = token i may be
  // sampled); every other token's logit is -inf before penalties, truncation and the draw, so the
  // choice is the one the unconstrained sampler would make over the allowed tokens alone. Logprobs stay
  // those of the model's raw distribution (what the model believed, as OpenAI reports them).
  SampledToken sample(const float* logits, const uint32_t* allowed = nullptr);
  // How a masked row is sampled. Sparse (the default): where the mask leaves few tokens and neither penalties
  // nor truncation apply, only the allowed ids are visited (sample_sparse); off: always the dense reference,
  // the row copied with every refused logit set to -inf. Both draw the same token from the same state
  // (tests/unit/generate/sampler_test.cc and engine_constraint_test.cc compare them).
  void set_sparse_masks(bool on) { sparse_masks_ = on; }

  // The seed the RNG was started with (params.seed, or the drawn one when unset).
  uint64_t seed() const { return seed_; }

  // ---- sampling on a device (core/exec/step_executor.h RowSampling) ----
  // Whether the token is a function of the raw logits and one uniform draw that a device sampler computes:
  // no penalties (they need the history) and no logprobs (they need the row).
  bool device_eligible() const { return !penalize_ && n_logprobs_ < 0; }
  // The parameters of the next draw for a device sampler; `u` is the draw sample() would make now (the RNG
  // advances unless greedy, exactly as sample() would), so a seed gives the same stream of draws whichever
  // side samples.
  void plan_device_draw(bool* greedy, float* temperature, int32_t* top_k, float* top_p, float* min_p, double* u);
  // Accepts the token a device sampled with plan_device_draw's draw (records it like sample()).
  SampledToken accept_device_token(int32_t id);

 private:
  struct Candidate {
    float value;  // logit, then unnormalized probability
    int32_t id;
  };

  // Steps 5 and 9 over the whole vocabulary when no truncation is asked for (vectorised); -1 when the
  // logits are degenerate (no finite maximum) or T is too small for 1/T: the general path takes those.
  int32_t sample_full(const float* logits);
  // sample()'s greedy and sample_full() steps over the ids `allowed` lets through, raw logits, no penalties:
  // the same id from the same uniform as the dense path over the masked row. -1 (nothing drawn) where the
  // mask is dense enough that the vectorised dense path is cheaper, or the logits are degenerate.
  int32_t sample_sparse(const float* raw, const uint32_t* allowed);
  // Steps 1-3: the raw row itself, or logits_ holding it masked by `allowed` and penalized.
  const float* penalized(const float* raw, const uint32_t* allowed);
  void apply_penalties(float* logits) const;  // steps 2-3 on [V], in place
  // Steps 5-8: cand_[0, n_cand_) = the surviving tokens with their unnormalized probabilities.
  void build_candidates(const float* logits);
  // Step 9 over cand_ (one uniform).
  int32_t draw_candidate();
  void record(int32_t id);  // appends a generated token to the history
  void fill_logprobs(const float* raw, SampledToken& out);
  double uniform01();

  // Request parameters (validated).
  float temperature_;
  int32_t top_k_;  // 0 = off (also when the request asked for >= V)
  float top_p_;
  float min_p_;
  float repetition_penalty_;
  float presence_penalty_;
  float frequency_penalty_;
  int32_t n_logprobs_;  // -1 off; clamped to V
  int32_t n_vocab_;
  bool greedy_;  // temperature == 0 or top_k == 1
  uint64_t seed_;
  std::mt19937_64 rng_;

  // Penalty history (empty vectors when the corresponding penalty is off).
  std::vector<uint8_t> in_context_;   // [V] 1 when the token is in prompt + generated
  std::vector<int32_t> context_ids_;  // distinct ids with in_context_ == 1
  std::vector<int32_t> gen_count_;    // [V] times the token was generated
  std::vector<int32_t> gen_ids_;      // distinct ids with gen_count_ > 0
  bool penalize_ = false;             // any penalty on

  // Work buffers, sized once.
  std::vector<float> logits_;    // [V] penalized logits
  std::vector<Candidate> cand_;  // [V] candidates; only the first n_cand_ are live
  int32_t n_cand_ = 0;
  bool cand_sorted_ = false;        // the live candidates are sorted by (value desc, id asc)
  std::vector<Candidate> top_buf_;  // [V] logprobs for the top-n selection (when n > 0)
  static constexpr int32_t kBlock = 64;
  std::vector<float> probs_;        // [V] softmax numerators (sample_full)
  std::vector<double> block_sums_;  // [V / kBlock] their sums per block of ids
  bool sparse_masks_ = true;
  std::vector<int32_t> sparse_ids_;  // sample_sparse: the allowed ids, increasing
  std::vector<float> sparse_p_;      // and their softmax numerators
  struct SparseBlock {
    size_t begin, end;  // sparse_ids_[begin, end): the allowed ids of one block of kBlock ids
    double sum;         // block_sums_'s value for that block
  };
  std::vector<SparseBlock> sparse_blocks_;
};

}  // namespace frost
