#include "core/generate/speculation.h"

#include <algorithm>
#include <cmath>

namespace frost {

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kServer:
      return "server";
    case SpecMethod::kOff:
      return "off";
    case SpecMethod::kNgram:
      return "ngram";
    case SpecMethod::kSuffix:
      return "suffix";
  }
  return "?";
}

Speculation::Speculation(SpecMethod method, int32_t k, int32_t vocab_size, const SuffixCache* shared)
    : method_(method), k_(std::max(1, k)), ema_(static_cast<double>(std::max(1, k))) {
  if (method == SpecMethod::kSuffix) {
    SuffixOptions o;
    // Depth 16 (Arctic's default is 64 for agentic traces): per sequence ≤ 64·16 bytes per token of its own
    // trie (drafter.h), ~0.8 KB measured; matches beyond 15 tokens add little acceptance on chat-length text.
    o.max_depth = 16;
    o.max_match = 15;
    o.vocab_size = vocab_size;
    drafter_ = std::make_unique<SuffixDrafter>(o, shared);
  } else {
    PromptLookupOptions o;
    o.vocab_size = vocab_size;
    drafter_ = std::make_unique<PromptLookupDrafter>(o);
  }
}

int32_t Speculation::next_length() const {
  if (skip_ > 0) return 0;
  return std::clamp(static_cast<int32_t>(std::ceil(ema_)) + 1, 1, k_);
}

void Speculation::draft(absl::Span<const int32_t> tokens, std::vector<int32_t>* out) {
  out->clear();
  const int32_t n = next_length();
  if (skip_ > 0) --skip_;
  drafter_->propose(tokens, n, out);  // n = 0 only syncs the index
}

void Speculation::record(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  ema_ = (ema_ + accepted) / 2;
  if (accepted > 0) {
    cool_ = 0;
  } else {
    cool_ = std::min(32, cool_ == 0 ? 1 : 2 * cool_);
    skip_ = cool_;
  }
}

}  // namespace frost
