#include "core/generate/speculation.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

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

absl::Status check_speculative_options(const SpeculativeOptions& o) {
  if (o.method == SpecMethod::kServer)
    return absl::InvalidArgumentError("engine.speculative.method must be off, ngram or suffix");
  if (o.num_tokens < 1 || o.num_tokens > 32)
    return absl::InvalidArgumentError(
        absl::StrCat("engine.speculative.num_tokens must be in [1, 32], got ", o.num_tokens));
  if (o.max_batch < 0)
    return absl::InvalidArgumentError(absl::StrCat("engine.speculative.max_batch must be >= 0, got ", o.max_batch));
  if (o.jump_forward_tokens < 0 || o.jump_forward_tokens > 256)
    return absl::InvalidArgumentError(
        absl::StrCat("engine.speculative.jump_forward_tokens must be in [0, 256], got ", o.jump_forward_tokens));
  if (o.suffix_cache_tokens < 0 || o.suffix_cache_tokens > (int64_t{1} << 30))
    return absl::InvalidArgumentError(absl::StrCat(
        "engine.speculative.suffix_cache_tokens must be in [0, 2^30], got ", o.suffix_cache_tokens));
  return absl::OkStatus();
}

Speculation::Speculation(SpecMethod method, int32_t k, int32_t vocab_size, const SuffixCache* shared)
    : method_(method), k_(std::max(1, k)), ema_(static_cast<double>(std::max(1, k))) {
  if (method == SpecMethod::kSuffix) {
    SuffixOptions o;
    o.max_depth = kSuffixDepth;
    o.max_match = kSuffixDepth - 1;
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

void Speculation::draft(absl::Span<const int32_t> tokens, int32_t limit, std::vector<int32_t>* out) {
  out->clear();
  const int32_t n = std::min(next_length(), limit);
  if (skip_ > 0 && limit > 0) --skip_;
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
