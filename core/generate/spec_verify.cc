#include "core/generate/spec_verify.h"

#include "core/common/check.h"

namespace frost {

// The Sampler's internals the rule needs (a friend of Sampler), so the verification reuses the
// sampler's own processing instead of a copy of it.
struct SpecVerifyAccess {
  static bool greedy(const Sampler& s) { return s.greedy_; }

  // Builds row `raw`'s candidates (steps 1-8) and returns p(d) and the mass left without d, both
  // relative to the candidates' total (summed in their order, in double).
  static void probability(Sampler& s, const float* raw, const uint32_t* allowed, int32_t d, double* p_d,
                          double* rest) {
    s.build_candidates(s.penalized(raw, allowed));
    double total = 0.0, w_d = 0.0, w_rest = 0.0;
    for (int32_t i = 0; i < s.n_cand_; ++i) {
      const double w = s.cand_[static_cast<size_t>(i)].value;
      total += w;
      if (s.cand_[static_cast<size_t>(i)].id == d) {
        w_d += w;
      } else {
        w_rest += w;
      }
    }
    *p_d = total > 0.0 ? w_d / total : 0.0;
    *rest = w_rest;
  }

  static double uniform(Sampler& s) { return s.uniform01(); }
  static int32_t draw_without(Sampler& s, int32_t d) { return s.draw_candidate(d); }

  // The SampledToken for `id` drawn from row `raw`, recorded in the history like sample() does.
  static SampledToken take(Sampler& s, const float* raw, int32_t id) {
    SampledToken out;
    out.id = id;
    if (s.n_logprobs_ >= 0) s.fill_logprobs(raw, out);
    s.record(id);
    return out;
  }

  static int32_t vocab(const Sampler& s) { return s.n_vocab_; }
};

DraftVerdict verify_draft(Sampler& sampler, absl::Span<const int32_t> draft, const float* logits,
                          absl::Span<const uint32_t* const> allowed) {
  const auto k = static_cast<int32_t>(draft.size());
  FROST_CHECK(allowed.empty() || allowed.size() == draft.size() + 1, "verify_draft: one mask per logits row");
  const int64_t v = SpecVerifyAccess::vocab(sampler);
  auto row = [&](int32_t i) { return logits + static_cast<int64_t>(i) * v; };
  auto mask = [&](int32_t i) { return allowed.empty() ? nullptr : allowed[static_cast<size_t>(i)]; };

  DraftVerdict out;
  out.tokens.reserve(draft.size() + 1);
  if (SpecVerifyAccess::greedy(sampler)) {
    // sample() row by row: the argmax of each processed row, stopping at the first disagreement.
    for (int32_t i = 0; i <= k; ++i) {
      out.tokens.push_back(sampler.sample(row(i), mask(i)));
      if (i == k || out.tokens.back().id != draft[static_cast<size_t>(i)]) break;
      ++out.accepted;
    }
    return out;
  }
  for (int32_t i = 0; i < k; ++i) {
    const int32_t d = draft[static_cast<size_t>(i)];
    double p_d = 0.0, rest = 0.0;
    SpecVerifyAccess::probability(sampler, row(i), mask(i), d, &p_d, &rest);
    // Accept with probability p(d). rest == 0 means all the mass is on d (p_d == 1, always taken
    // already); it only guards the residual draw against rounding.
    if (SpecVerifyAccess::uniform(sampler) < p_d || rest <= 0.0) {
      out.tokens.push_back(SpecVerifyAccess::take(sampler, row(i), d));
      ++out.accepted;
      continue;
    }
    // Rejected: the correction from p with d removed (the residual max(0, p - δ_d), renormalized).
    const int32_t x = SpecVerifyAccess::draw_without(sampler, d);
    out.tokens.push_back(SpecVerifyAccess::take(sampler, row(i), x));
    return out;
  }
  out.tokens.push_back(sampler.sample(row(k), mask(k)));  // all k accepted: the bonus token
  return out;
}

}  // namespace frost
