#include "core/generate/stop_condition.h"

#include <algorithm>

namespace frost {
namespace {

bool is_utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

StopChecker::StopChecker(const SamplingParams& params, const std::vector<int32_t>& eos_ids)
    : stop_ids_(params.stop_token_ids) {
  for (const std::string& s : params.stop) {
    if (!s.empty()) stop_.push_back(s);
  }
  if (!params.ignore_eos) stop_ids_.insert(stop_ids_.end(), eos_ids.begin(), eos_ids.end());
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

bool StopChecker::is_stop_token(int32_t id) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id);
}

StopResult StopChecker::on_text(std::string_view delta) {
  StopResult result;
  if (stopped_) {
    result.stopped = true;
    result.matched = matched_;
    return result;
  }
  held_.append(delta);
  if (stop_.empty()) {
    result.emit.swap(held_);
    return result;
  }

  // The held tail contained no complete stop string, so any match ends inside `delta`.
  // Earliest end wins; on equal ends the earlier start (the longer string).
  size_t best_pos = std::string::npos, best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stop_) {
    const size_t pos = held_.find(s);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (best == nullptr || end < best_end || (end == best_end && pos < best_pos)) {
      best = &s, best_pos = pos, best_end = end;
    }
  }
  if (best != nullptr) {
    stopped_ = true;
    matched_ = *best;
    result.emit = held_.substr(0, best_pos);
    result.stopped = true;
    result.matched = matched_;
    held_.clear();
    return result;
  }

  // Hold back what could still grow into a stop string; never cut inside a UTF-8 character
  // (a valid stop string starts on a character boundary, so this only guards bad input).
  size_t cut = held_.size() - partial_match_length(held_);
  while (cut > 0 && cut < held_.size() && is_utf8_continuation(held_[cut])) --cut;
  result.emit = held_.substr(0, cut);
  held_.erase(0, cut);
  return result;
}

std::string StopChecker::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

size_t StopChecker::partial_match_length(std::string_view s) const {
  size_t best = 0;
  for (const std::string& stop : stop_) {
    // Longest k < |stop| (and > best) with s ending in stop[0, k).
    for (size_t k = std::min(stop.size() - 1, s.size()); k > best; --k) {
      if (s.compare(s.size() - k, k, stop, 0, k) == 0) {
        best = k;
        break;
      }
    }
  }
  return best;
}

}  // namespace frost
