#pragma once
// SentencePiece tokenizer (LLaMA-2 style tokenizer.model) behind the Tokenizer interface,
// a thin wrapper over libsentencepiece's SentencePieceProcessor.
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/tokenizer.h"

namespace frost {

// Loads a serialized sentencepiece ModelProto (tokenizer.model). NOT_FOUND when the file is
// absent, INVALID_ARGUMENT (naming the file) when libsentencepiece rejects it, UNAVAILABLE when
// the backend library libfrost_spm.so cannot be loaded (spm_backend.h explains why it is a
// separate library), UNIMPLEMENTED in AddressSanitizer builds (no RTLD_DEEPBIND there).
// Semantics: encode = EncodeAsIds (+ BOS), decode = DecodeIds (unk → " ⁇ ", leading space of
// the first piece dropped) with invalid UTF-8 replaced by U+FFFD, token_bytes: "▁" → ' ',
// <0xNN> byte pieces → that byte, control and unknown pieces → "". kind() "sentencepiece".
absl::StatusOr<std::unique_ptr<Tokenizer>> load_sentencepiece_tokenizer(const std::string& path);

}  // namespace frost
