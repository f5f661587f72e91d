#include "core/model/tokenizer_spm.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/common/log.h"
#include "core/common/utf8.h"
#include "core/model/spm_backend.h"

namespace frost {
namespace {

// GCC defines __SANITIZE_ADDRESS__ under -fsanitize=address; clang 14 does not, it has __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define FROST_SPM_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FROST_SPM_UNDER_ASAN 1
#endif
#endif

// dlopen()s libfrost_spm.so once (see spm_backend.h). Search order: the path of the build tree this
// binary was built in, then the dynamic loader's search path (LD_LIBRARY_PATH, the rpath, the system
// directories: where an installed or containerised frostd finds it). No environment switch of frost's own.
absl::StatusOr<SpmOpenFn> spm_open_fn() {
#if defined(FROST_SPM_UNDER_ASAN)
  // AddressSanitizer refuses RTLD_DEEPBIND, which the isolation depends on.
  return absl::UnimplementedError("sentencepiece is unavailable in AddressSanitizer builds");
#else
  static std::once_flag once;
  static SpmOpenFn fn = nullptr;
  static std::string error;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
#ifdef FROST_SPM_LIB_PATH
    candidates.push_back(FROST_SPM_LIB_PATH);
#endif
    candidates.push_back("libfrost_spm.so");
    for (const auto& c : candidates) {
      void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!h) {
        error += absl::StrCat(error.empty() ? "" : "; ", dlerror());
        continue;
      }
      fn = reinterpret_cast<SpmOpenFn>(dlsym(h, kSpmOpenSymbol));
      if (fn) return;
      error += absl::StrCat("; ", c, ": no symbol ", kSpmOpenSymbol);
    }
  });
  if (!fn) return absl::UnavailableError(absl::StrCat("cannot load libfrost_spm.so: ", error));
  return fn;
#endif
}

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'

std::string replace_metaspace(const std::string& piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kMetaspace.size(), kMetaspace) == 0) {
      out += ' ';
      i += kMetaspace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // `sp` must be loaded. Precomputes the per-id tables so the hot per-token calls
  // (token_bytes, is_special) never touch the processor.
  explicit SentencePieceTokenizer(std::unique_ptr<SpmBackend> sp) : sp_(std::move(sp)) {
    const int n = sp_->piece_size();
    pieces_.resize(static_cast<size_t>(n));
    bytes_.resize(static_cast<size_t>(n));
    special_.resize(static_cast<size_t>(n));
    for (int id = 0; id < n; ++id) {
      const auto i = static_cast<size_t>(id);
      pieces_[i] = sp_->id_to_piece(id);
      // Unknown counts as special: it stands for text the vocabulary cannot spell, so it
      // contributes no bytes to a stream (HF's LLaMA tokenizer.json likewise marks <unk> special
      // and skips it). Full decode() still follows DecodeIds and renders it as " ⁇ ".
      special_[i] = sp_->is_control(id) || sp_->is_unknown(id);
      if (special_[i]) continue;
      const int byte = sp_->is_byte(id) ? parse_byte_piece(pieces_[i]) : -1;
      bytes_[i] =
          byte >= 0 ? std::string(1, static_cast<char>(byte)) : replace_metaspace(pieces_[i]);
    }
  }

  absl::StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_bos) const override {
    std::vector<int> ids;
    std::string error;
    if (!sp_->encode(text, &ids, &error)) {
      return absl::InternalError(absl::StrCat("sentencepiece encode: ", error));
    }
    std::vector<int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_bos && bos_id() >= 0) out.push_back(bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    return in_range(id) ? bytes_[static_cast<size_t>(id)] : std::string();
  }

  std::string decode(absl::Span<const int32_t> ids) const override {
    // Out-of-range ids are dropped: DecodeIds would reject the whole sequence.
    std::vector<int> valid;
    valid.reserve(ids.size());
    for (const int32_t id : ids) {
      if (in_range(id)) valid.push_back(id);
    }
    std::string text, error;
    if (!sp_->decode(valid, &text, &error)) {
      // Not expected for in-range ids; fall back to the streaming bytes rather than failing.
      FROST_LOG_WARN("sentencepiece decode: %s", error.c_str());
      text.clear();
      for (const int id : valid) text += bytes_[static_cast<size_t>(id)];
    }
    return sanitize_utf8(text);
  }

  std::string id_to_piece(int32_t id) const override {
    return in_range(id) ? pieces_[static_cast<size_t>(id)] : std::string();
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return sp_->bos_id(); }
  int32_t eos_id() const override { return sp_->eos_id(); }
  bool is_special(int32_t id) const override {
    return in_range(id) && special_[static_cast<size_t>(id)];
  }
  std::string kind() const override { return "sentencepiece"; }

 private:
  bool in_range(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < pieces_.size(); }

  // SentencePieceProcessor's const methods are thread-safe; nothing here mutates after
  // construction.
  const std::unique_ptr<SpmBackend> sp_;
  std::vector<std::string> pieces_;  // [vocab] IdToPiece
  std::vector<std::string> bytes_;   // [vocab] token_bytes
  std::vector<bool> special_;        // [vocab] control or unknown
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> load_sentencepiece_tokenizer(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": sentencepiece model not found"));
  }
  absl::StatusOr<SpmOpenFn> open = spm_open_fn();
  if (!open.ok()) return open.status();
  std::string error;
  std::unique_ptr<SpmBackend> sp((*open)(path.c_str(), &error));
  if (!sp) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a valid sentencepiece model: ", error));
  }
  if (sp->piece_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": sentencepiece model has no pieces"));
  }
  return std::unique_ptr<Tokenizer>(std::make_unique<SentencePieceTokenizer>(std::move(sp)));
}

}  // namespace frost
