#pragma once
// StopChecker: stop token ids and stop strings, checked incrementally on streamed text.
//
// Stop strings follow OpenAI semantics: the text before the first stop string is returned and
// the stop string itself is not. Text that could be the beginning of a stop string is held
// back until it either completes the stop string or is ruled out, so nothing after a stop is
// ever streamed. "First" means the match that completes earliest in the stream (ties: the
// one that starts earliest), so the result does not depend on how the text is split into
// deltas. Max tokens, deadlines and cancellation are the generator's business.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/generate/sampling_params.h"

namespace frost {

struct StopResult {
  std::string emit;      // text safe to stream now (valid UTF-8 when the input is)
  bool stopped = false;  // a stop string matched; `emit` ends just before it
  std::string matched;   // the stop string that matched
};

class StopChecker {
 public:
  // Copies params.stop, params.stop_token_ids and params.ignore_eos. `eos_ids` stop unless
  // ignore_eos. Empty stop strings are ignored (validation rejects them).
  StopChecker(const SamplingParams& params, const std::vector<int32_t>& eos_ids);

  // True when sampling `id` ends generation: stop_token_ids always, eos ids unless ignore_eos.
  bool is_stop_token(int32_t id) const;

  // Feeds the next text delta (valid UTF-8, e.g. from IncrementalDetokenizer). Mutates the
  // held-back tail. After a stop, further calls return {"", true, matched} and emit nothing.
  StopResult on_text(std::string_view delta);

  // End of generation without a stop string: returns the held-back text ("" after a stop).
  std::string flush();

  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of `s` that is a proper prefix of some stop string.
  size_t partial_match_length(std::string_view s) const;

  std::vector<std::string> stop_;  // non-empty stop strings
  std::vector<int32_t> stop_ids_;  // sorted, distinct
  std::string held_;               // tail that may begin a stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace frost
