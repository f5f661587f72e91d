// load_tokenizer(): picks the tokenizer file of a Hugging Face model directory; the default
// Tokenizer::encode_with_specials.
#include "core/model/tokenizer.h"

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/model/tokenizer_bpe.h"
#include "core/model/tokenizer_spm.h"

namespace frost {
namespace {

bool is_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

}  // namespace

int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    const int digit = (c >= '0' && c <= '9')   ? c - '0'
                      : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                      : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                               : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::encode_with_specials(std::string_view text,
                                                                     bool add_bos) const {
  std::vector<std::pair<std::string, int32_t>> specials;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (!is_special(id)) continue;
    std::string piece = id_to_piece(id);
    if (!piece.empty()) specials.emplace_back(std::move(piece), id);
  }
  std::vector<int32_t> out;
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t best = std::string_view::npos, best_len = 0;
    int32_t best_id = -1;
    for (const auto& [piece, id] : specials) {
      const size_t at = text.find(piece, pos);
      if (at == std::string_view::npos) continue;
      if (at < best || (at == best && piece.size() > best_len)) {
        best = at;
        best_len = piece.size();
        best_id = id;
      }
    }
    const size_t end = best == std::string_view::npos ? text.size() : best;
    if (end > pos) {
      FROST_ASSIGN_OR_RETURN(std::vector<int32_t> ids, encode(text.substr(pos, end - pos), false));
      out.insert(out.end(), ids.begin(), ids.end());
    }
    if (best == std::string_view::npos) break;
    out.push_back(best_id);
    pos = best + best_len;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_dir,
                                                          TokenizerPreference pref) {
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) {
    return absl::NotFoundError(absl::StrCat(model_dir, ": model directory not found"));
  }
  const std::string spm_path = model_dir + "/tokenizer.model";
  const std::string json_path = model_dir + "/tokenizer.json";
  switch (pref) {
    case TokenizerPreference::kSentencePiece:
      return load_sentencepiece_tokenizer(spm_path);
    case TokenizerPreference::kHfJson:
      return BpeTokenizer::load(json_path);
    case TokenizerPreference::kAuto:
      // tokenizer.model first: when both exist (LLaMA-2 checkpoints) it is the original and
      // libsentencepiece is the reference implementation; tokenizer.json is a conversion.
      if (is_file(spm_path)) return load_sentencepiece_tokenizer(spm_path);
      if (is_file(json_path)) return BpeTokenizer::load(json_path);
      return absl::NotFoundError(absl::StrCat(model_dir, ": no tokenizer.model or tokenizer.json"));
  }
  return absl::InvalidArgumentError("load_tokenizer: unknown TokenizerPreference");
}

}  // namespace frost
