// Unicode normalization for the NFC / NFD / NFKC / NFKD normalizers of a tokenizer.json
// (Qwen2/Qwen3 use NFC; some SentencePiece conversions NFKC). ICU's Normalizer2 does the work:
// Unicode data is too large and too subtle (canonical ordering, composition exclusions, Hangul)
// to carry a table of our own. Built without ICU (FROST_HAVE_ICU unset), the parser refuses
// these normalizers by name rather than producing ids the model never saw.
#include <string>
#include <string_view>

#include "core/model/tokenizer_bpe_internal.h"

#if FROST_HAVE_ICU
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/utypes.h>
#endif

namespace frost {
namespace bpe_internal {

#if FROST_HAVE_ICU

bool unicode_normalization_available() { return true; }

std::string unicode_normalize(std::string_view text, UnicodeForm form) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case UnicodeForm::kNFC:
      n = icu::Normalizer2::getNFCInstance(err);
      break;
    case UnicodeForm::kNFD:
      n = icu::Normalizer2::getNFDInstance(err);
      break;
    case UnicodeForm::kNFKC:
      n = icu::Normalizer2::getNFKCInstance(err);
      break;
    case UnicodeForm::kNFKD:
      n = icu::Normalizer2::getNFKDInstance(err);
      break;
  }
  if (U_FAILURE(err) || n == nullptr) return std::string(text);  // ICU's data missing: unchanged
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  // Most text is already normalized: the quick check avoids building a second string.
  if (n->isNormalized(in, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  const icu::UnicodeString out = n->normalize(in, err);
  if (U_FAILURE(err)) return std::string(text);
  std::string utf8;
  out.toUTF8String(utf8);
  return utf8;
}

#else  // !FROST_HAVE_ICU

bool unicode_normalization_available() { return false; }
std::string unicode_normalize(std::string_view text, UnicodeForm) { return std::string(text); }

#endif

}  // namespace bpe_internal
}  // namespace frost
