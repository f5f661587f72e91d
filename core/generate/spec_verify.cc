#include "core/generate/spec_verify.h"

#include "core/common/check.h"

namespace frost {

DraftVerdict verify_draft(Sampler& sampler, absl::Span<const int32_t> draft, const float* logits,
                          absl::Span<const uint32_t* const> allowed) {
  const auto k = static_cast<int32_t>(draft.size());
  FROST_CHECK(allowed.empty() || allowed.size() == draft.size() + 1, "verify_draft: one mask per logits row");
  const int64_t v = sampler.vocab_size();
  DraftVerdict out;
  out.tokens.reserve(draft.size() + 1);
  // sample() row by row (spec_verify.h): the token plain decoding would draw, kept while it equals the draft.
  for (int32_t i = 0; i <= k; ++i) {
    out.tokens.push_back(
        sampler.sample(logits + static_cast<int64_t>(i) * v, allowed.empty() ? nullptr : allowed[static_cast<size_t>(i)]));
    if (i == k || out.tokens.back().id != draft[static_cast<size_t>(i)]) break;
    ++out.accepted;
  }
  return out;
}

}  // namespace frost
