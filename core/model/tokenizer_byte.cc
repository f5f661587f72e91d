// The built-in byte-level tokenizer of builtin:* models (contract in tokenizer.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/common/log.h"
#include "core/common/utf8.h"
#include "core/model/tokenizer.h"

namespace frost {
namespace {

constexpr int32_t kUnkId = 0;
constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kFirstByteId = 3;      // id of byte 0x00
constexpr int32_t kFirstFillerId = 259;  // first id after the 256 byte tokens
constexpr int32_t kNumPrintable = 95;    // ' ' .. '~'

class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(int32_t vocab_size) : vocab_size_(vocab_size) {}

  absl::StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size() + 1);
    if (add_bos) ids.push_back(kBosId);
    for (const char c : text) ids.push_back(kFirstByteId + static_cast<uint8_t>(c));
    return ids;
  }

  std::string token_bytes(int32_t id) const override {
    if (id < kFirstByteId || id >= vocab_size_) return "";
    if (id < kFirstFillerId) return std::string(1, static_cast<char>(id - kFirstByteId));
    // Filler ids only exist so random-weight models print ordinary text.
    return std::string(1, static_cast<char>(' ' + (id - kFirstFillerId) % kNumPrintable));
  }

  std::string decode(absl::Span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (const int32_t id : ids) out += token_bytes(id);
    return sanitize_utf8(out);
  }

  std::string id_to_piece(int32_t id) const override {
    switch (id) {
      case kUnkId:
        return "<unk>";
      case kBosId:
        return "<s>";
      case kEosId:
        return "</s>";
      default:
        break;
    }
    if (id < 0 || id >= vocab_size_) return "";
    // Byte ids use sentencepiece's byte-piece spelling so logs read like LLaMA vocabularies.
    if (id < kFirstFillerId) return absl::StrFormat("<0x%02X>", id - kFirstByteId);
    return token_bytes(id);
  }

  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return kBosId; }
  int32_t eos_id() const override { return kEosId; }
  bool is_special(int32_t id) const override { return id >= kUnkId && id <= kEosId; }
  std::string kind() const override { return "byte"; }

 private:
  const int32_t vocab_size_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer(int32_t vocab_size) {
  // The contract requires >= 259; a smaller value cannot hold the byte ids, and this factory
  // cannot fail, so it is raised (loudly) rather than crashing a builtin model load.
  if (vocab_size < kFirstFillerId) {
    FROST_LOG_WARN("make_byte_tokenizer: vocab_size %d < %d, using %d", vocab_size, kFirstFillerId,
                   kFirstFillerId);
    vocab_size = kFirstFillerId;
  }
  return std::make_unique<ByteTokenizer>(vocab_size);
}

}  // namespace frost
