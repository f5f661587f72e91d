#pragma once
// UTF-8 helpers shared by tokenizers, the detokenizer and (later) request validation.
#include <cstddef>
#include <string>
#include <string_view>

namespace frost {

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Length of the longest prefix of `s` that is well-formed UTF-8: the offset of the first byte that does not
// start a complete valid sequence (s.size() when `s` is valid).
size_t utf8_valid_prefix(std::string_view s);

// Length of the longest prefix of `s` that can be emitted now: complete valid sequences,
// stopping before a trailing *incomplete but still possibly valid* sequence. Bytes that can
// never become valid are included (the caller replaces them, see sanitize_utf8).
size_t utf8_emittable_prefix(std::string_view s);

// Replaces every invalid byte sequence with U+FFFD (one per maximal invalid subpart, as
// WHATWG/Unicode recommend). Valid input is returned unchanged.
std::string sanitize_utf8(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (must be <= 0x10FFFF, not a surrogate).
void append_utf8(std::string& out, char32_t cp);

}  // namespace frost
