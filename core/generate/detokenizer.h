#pragma once
// IncrementalDetokenizer: generated token ids → a stream of valid UTF-8 text pieces.
//
// A token may carry part of a multi-byte character (byte-fallback <0xE2>, byte-level BPE
// pieces), so bytes are buffered until they form complete characters. The text is the bytes
// the tokens append to the prompt's text (Tokenizer::token_bytes), so a leading metaspace
// space of the first generated token is kept — it separates the continuation from the prompt.
#include <cstdint>
#include <string>

#include "core/model/tokenizer.h"

namespace frost {

class IncrementalDetokenizer {
 public:
  // `tok` is borrowed and must outlive the detokenizer.
  explicit IncrementalDetokenizer(const Tokenizer& tok) : tok_(tok) {}

  // Appends token `id`'s bytes; returns the newly emittable text: complete, valid UTF-8.
  // A trailing incomplete-but-possibly-valid sequence (at most 3 bytes) is held back until
  // a later token completes it; bytes that can never become valid are replaced by U+FFFD
  // (one per maximal invalid subpart). Special tokens contribute "".
  std::string push(int32_t id);

  // End of stream: returns the held-back bytes, sanitized (a truncated sequence → U+FFFD).
  std::string flush();

  // Everything returned by push() and flush() so far, concatenated.
  const std::string& text() const { return text_; }

  // Bytes currently held back (0..3).
  size_t n_pending() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  std::string pending_;  // incomplete trailing UTF-8 sequence
  std::string text_;
};

}  // namespace frost
