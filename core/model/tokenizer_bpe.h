#pragma once
// Our own implementation of the Hugging Face `tokenizers` BPE pipeline read from a
// tokenizer.json (written from its documented behaviour; no code copied). Two families:
//  * LLaMA / sentencepiece style ("bpe-metaspace"): normalizer Sequence of Replace / Prepend /
//    Strip, no pre-tokenizer or a Metaspace one, BPE with byte_fallback and unk, decoder
//    Replace / ByteFallback / Fuse / Strip or Metaspace.
//  * GPT-2 byte-level ("bpe-bytelevel"; Llama 3, Qwen2/3): ByteLevel, Split(Regex) and Digits pre-tokenizers
//    (RE2 is the regex engine), the GPT-2 byte → printable code point map, ByteLevel decoder.
// Anything else in the file that would change the ids (other model types, normalizers,
// pre-tokenizers, decoders, BPE dropout, subword prefixes/suffixes, regex lookarounds other
// than the emulated GPT-2 `\s+(?!\S)`) is rejected with INVALID_ARGUMENT naming the field.
//
// Also: the NFC / NFD / NFKC / NFKD normalizers (ICU; Qwen2/Qwen3 use NFC), and added tokens
// with their special / lstrip / rstrip / normalized / single_word flags.
//
// Choices where tokenizer.json leaves the behaviour to the caller:
//  * Special-token text in a prompt (the policy; README "Tokenizers"): encode() matches the
//    added tokens that are NOT special (HF always does: they are vocabulary, e.g. Qwen3's
//    <think>, Gemma 3's "\n\n" and HTML tags) and leaves the text of special tokens as
//    plain text, so a prompt cannot forge <|im_start|> or <|eot_id|>; HF's default (and
//    encode_with_specials()) parses them too. A rendered chat template's markup is parsed,
//    the special-token text of the messages' content is not (server/http_server.h,
//    escape_special_text).
//  * bos_id: the special token a TemplateProcessing `single` template puts before $A (also
//    inside a post_processor Sequence; RobertaProcessing/BertProcessing: `cls`); without one,
//    an added special token spelled <s>, <|begin_of_text|>, <bos> or <|startoftext|>; else -1.
//    So GPT-2 (no template, only <|endoftext|>) has no BOS, as HF's encode() adds none.
//    Tokens a template puts after $A (EOS of some models) are not appended.
//  * eos_id: the first added special token spelled </s>, <|endoftext|>, <|end_of_text|> or
//    <eos>; else -1. config.json's eos_token_id is the authority for stopping generation.
//  * is_special: added tokens with "special": true, plus the model's unk token. decode()
//    skips them (HF decode with skip_special_tokens=true); token_bytes() returns "".
//  * Invalid UTF-8 input is first replaced with U+FFFD (what Python's errors="replace" does
//    before text reaches HF, whose API takes only valid strings).
//  * truncation / padding in the file are ignored: frost never truncates or pads here.
//
// Threading: immutable after parse() except for an internal word → ids cache guarded by a
// mutex, so every method is safe to call concurrently.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/tokenizer.h"

namespace frost {

class BpeTokenizer final : public Tokenizer {
 public:
  // Reads and parses a tokenizer.json. NOT_FOUND when the file is absent; INVALID_ARGUMENT
  // "<path>: <field>: <problem>" when it is malformed or uses an unsupported feature.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> load(const std::string& path);
  // Same from the file's text; `source` names it in error messages.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> parse(std::string_view json_text,
                                                             const std::string& source);
  ~BpeTokenizer() override;

  absl::StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_bos) const override;
  absl::StatusOr<std::vector<int32_t>> encode_with_specials(std::string_view text,
                                                            bool add_bos) const override;
  std::string token_bytes(int32_t id) const override;
  std::string decode(absl::Span<const int32_t> ids) const override;
  std::string id_to_piece(int32_t id) const override;
  int32_t vocab_size() const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;
  bool is_special(int32_t id) const override;
  std::string kind() const override;  // "bpe-bytelevel" | "bpe-metaspace"

  // The words BPE runs on, in order: `text` after the normalizer and the pre-tokenizer,
  // already in the vocabulary's alphabet (byte-level words spell ' ' as "Ġ", metaspace words
  // start with "▁"). For tests and debugging.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  struct Impl;  // defined in tokenizer_bpe_internal.h

 private:
  explicit BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace frost
