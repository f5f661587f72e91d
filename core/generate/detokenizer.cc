#include "core/generate/detokenizer.h"

#include "core/common/utf8.h"

namespace frost {

std::string IncrementalDetokenizer::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  const size_t n = utf8_emittable_prefix(pending_);
  if (n == 0) return std::string();
  // The prefix ends on a sequence boundary, so sanitizing it alone replaces exactly the
  // invalid subparts it contains; the held-back tail stays a possibly valid prefix.
  std::string out = sanitize_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  text_ += out;
  return out;
}

std::string IncrementalDetokenizer::flush() {
  if (pending_.empty()) return std::string();
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  text_ += out;
  return out;
}

}  // namespace frost
