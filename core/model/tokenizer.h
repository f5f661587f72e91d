#pragma once
// Tokenizer interface. Implementations: SentencePiece (tokenizer.model, libsentencepiece),
// our own Hugging Face tokenizer.json BPE (byte-level GPT-2 style and LLaMA metaspace +
// byte-fallback style), and the built-in byte-level tokenizer of builtin:* models.
// All methods are const and thread-safe after construction.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace frost {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text → ids. Special-token strings inside `text` are NOT parsed (treated as plain text):
  // a prompt is data, and its text cannot forge control tokens (send prompt ids for that).
  // Added tokens that are not special (tokenizer.json "special": false, e.g. Qwen3's <think>,
  // Gemma 3's whitespace runs) ARE matched: they are ordinary vocabulary, and Hugging Face
  // matches them in every mode. `add_bos` prepends bos_id() when the tokenizer has one. Fails
  // only on internal errors (text is arbitrary bytes; invalid UTF-8 is handled like the
  // reference implementation).
  virtual absl::StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_bos) const = 0;

  // Text → ids with Hugging Face's default: the text of a special token becomes that token (for
  // tokenizer.json honouring its lstrip / rstrip / normalized / single_word flags). For text
  // whose markup is trusted: a rendered chat template. The default implementation splits on
  // the id_to_piece() of every is_special() id, earliest and then longest first, and encodes
  // the text between with encode(text, false).
  virtual absl::StatusOr<std::vector<int32_t>> encode_with_specials(std::string_view text,
                                                                    bool add_bos) const;

  // The raw bytes token `id` contributes to a generated text stream: metaspace "▁" → ' ',
  // byte-level "Ġ" etc. mapped back to bytes, byte-fallback <0xNN> → that single byte,
  // control/special tokens → "". May be an incomplete UTF-8 sequence. Out-of-range id → "".
  virtual std::string token_bytes(int32_t id) const = 0;

  // Full decode with the reference library's semantics (SentencePiece DecodeIds / HF decode
  // with skip_special_tokens): for metaspace tokenizers the leading space of the first piece
  // is dropped. Invalid UTF-8 is replaced with U+FFFD.
  virtual std::string decode(absl::Span<const int32_t> ids) const = 0;

  // The vocabulary string of `id` (e.g. "▁Once", "<0x0A>"); "" when out of range.
  virtual std::string id_to_piece(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;  // -1 when none
  // Control/special tokens (bos, eos, unk, pad, added special tokens).
  virtual bool is_special(int32_t id) const = 0;
  // "sentencepiece" | "bpe-bytelevel" | "bpe-metaspace" | "byte"
  virtual std::string kind() const = 0;
};

enum class TokenizerPreference {
  kAuto,           // tokenizer.model (sentencepiece) when present, else tokenizer.json
  kSentencePiece,  // require tokenizer.model
  kHfJson,         // require tokenizer.json (our BPE implementation)
};

// Loads the tokenizer of a Hugging Face model directory. NOT_FOUND when the required file is
// absent; INVALID_ARGUMENT (naming the file and the problem) when it cannot be parsed.
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_dir,
                                                          TokenizerPreference pref);

// The built-in byte-level tokenizer of builtin:* models: ids 0 <unk>, 1 <s>, 2 </s>,
// 3..258 the bytes 0x00..0xFF; ids >= 259 up to vocab_size-1 are filler tokens that decode
// to printable ASCII (' ' + (id - 259) % 95) so random-weight output stays ordinary text.
// Requires vocab_size >= 259.
std::unique_ptr<Tokenizer> make_byte_tokenizer(int32_t vocab_size);

// Byte-fallback piece spelling shared by sentencepiece and tokenizer.json: "<0x0A>" → 10;
// -1 when `piece` is not spelled like a byte piece.
int parse_byte_piece(std::string_view piece);

}  // namespace frost
